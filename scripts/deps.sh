#!/usr/bin/env bash
# Installs what building and testing snowflake needs, only where it is missing: the PostgreSQL
# servers with their headers (15 always, since `cargo test` builds the crate for it, and
# $PG_MAJOR; see scripts/pg.sh for where they come from), pg_partman where apt has it, clang for
# bindgen, libfaketime, valgrind, and cargo-pgrx 0.18.1 (the last release that builds with
# Rust 1.95).
# Safe to run again; quiet when there is nothing to do.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_MAJOR=${PG_MAJOR:-15}
PGRX_VERSION=0.18.1

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# dpkg-dev: dpkg-shlibdeps, for the package's dependencies (scripts/package.sh).
packages=(libclang-dev clang sudo libfaketime valgrind make python3 dpkg-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The client recipes' tests (tests/clients.rs) need Python's venv and Node.js with npm; a machine
# that has them from elsewhere (pyenv, NodeSource) keeps its own.
extra=()
python3 -c 'import ensurepip, venv' 2>/dev/null || extra+=(python3-venv)
command -v node >/dev/null || extra+=(nodejs)
command -v npm >/dev/null || extra+=(npm)
if [ ${#extra[@]} -gt 0 ]; then
  echo "deps: installing ${extra[*]}"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${extra[@]}" >/dev/null
fi

scripts/pg.sh 15 >/dev/null
scripts/pg.sh "$PG_MAJOR" >/dev/null

# pg_partman, for the partitioning recipe's test, where the distribution packages it for the major
# (Debian 12: 4.7 for 15; the PyPI builds have none).
for m in $(printf '%s\n' 15 "$PG_MAJOR" | sort -u); do
  p=postgresql-$m-partman
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  candidate=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p')
  if [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
    echo "deps: installing $p"
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null
  fi
done

if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  echo "deps: installing cargo-pgrx $PGRX_VERSION (a few minutes)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi

# pgrx's config names every major that is installed here, so that each can be built; `init`
# replaces the whole list, so it is given all of them whenever one is new.
config=${PGRX_HOME:-$HOME/.pgrx}/config.toml
args=()
stale=false
for m in 14 15 16 17 18; do
  if p=$(scripts/pg.sh --find "$m"); then
    args+=("--pg$m" "$p")
    grep -qx "pg$m = \"$p\"" "$config" 2>/dev/null || stale=true
  fi
done
if $stale; then
  cargo pgrx init "${args[@]}" >/dev/null
fi
