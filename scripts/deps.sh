#!/usr/bin/env bash
# Installs what building and testing snowflake needs, only where it is missing: PostgreSQL 15
# with its server headers, clang for bindgen, pgbench, libfaketime, valgrind, and cargo-pgrx
# 0.18.1 (the last release that builds with Rust 1.95). Safe to run again; quiet when done.
set -euo pipefail
PG_MAJOR=${PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
PGRX_VERSION=0.18.1

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

packages=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR libclang-dev clang
          sudo libfaketime valgrind make)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # Debian's postgresql-common would create and start a default cluster on 5432: we only want
  # the binaries, the tests start their own clusters.
  sudo_ mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | sudo_ tee /etc/postgresql-common/createcluster.d/no-main.conf >/dev/null
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  echo "deps: installing cargo-pgrx $PGRX_VERSION (a few minutes)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi

pgrx_home=${PGRX_HOME:-$HOME/.pgrx}
if ! grep -q "pg$PG_MAJOR" "$pgrx_home/config.toml" 2>/dev/null; then
  cargo pgrx init --pg$PG_MAJOR "$PG_CONFIG" >/dev/null
fi
