#!/usr/bin/env bash
# scripts/citus.sh NN: builds Citus 14.0.1 into PostgreSQL major NN's server (see scripts/pg.sh)
# unless that version is installed there already, and prints the server's pg_config. The tests and
# the benchmark call it; a second call costs nothing.
#
# The source is the `git archive` of Citus's tag v14.0.1 (AGPL-3.0) that this project's shared
# material holds, checked against its sha256: $SNOWFLAKE_CITUS_TARBALL, else
# ../shared/citus/citus-14.0.1.tar.gz beside the project, else /work/shared/citus/. Citus 14
# supports PostgreSQL 16, 17 and 18; for another major this prints why and exits with status 3.
set -euo pipefail
cd "$(dirname "$0")/.."
major=${1:?usage: scripts/citus.sh MAJOR}
CITUS_VERSION=14.0.1
CITUS_SHA256=26ddb8ec9de07c5fa8426e435d10936e5cd6bed01a5ad94aab92e818081e5ec9
# The version of Citus's SQL objects that 14.0.1 installs (its citus.control).
CITUS_SQL_VERSION=14.0-1

say() { echo "citus: $*" >&2; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

case $major in
  16 | 17 | 18) ;;
  *) say "Citus $CITUS_VERSION supports PostgreSQL 16, 17 and 18, not $major"; exit 3 ;;
esac
pg_config=${PG_CONFIG:-$(scripts/pg.sh "$major")}
# One build at a time per major: a second caller waits, then finds it installed.
exec 9>"/tmp/snowflake-citus-$major.lock"
flock 9
pkglibdir=$("$pg_config" --pkglibdir)
sharedir=$("$pg_config" --sharedir)
if [ -f "$pkglibdir/citus.so" ] &&
   grep -qx "default_version = '$CITUS_SQL_VERSION'" "$sharedir/extension/citus.control" 2>/dev/null; then
  echo "$pg_config"
  exit 0
fi

tarball=
for t in "${SNOWFLAKE_CITUS_TARBALL:-}" "../shared/citus/citus-$CITUS_VERSION.tar.gz" \
         "/work/shared/citus/citus-$CITUS_VERSION.tar.gz"; do
  if [ -n "$t" ] && [ -f "$t" ]; then tarball=$t; break; fi
done
[ -n "$tarball" ] || { say "citus-$CITUS_VERSION.tar.gz not found (set SNOWFLAKE_CITUS_TARBALL)"; exit 1; }
echo "$CITUS_SHA256  $tarball" | sha256sum --check --quiet >&2 ||
  { say "sha256 of $tarball does not match Citus $CITUS_VERSION's"; exit 1; }

# Build dependencies (Debian 12's names); libkrb5-dev because the servers' headers include GSSAPI.
missing=()
for p in libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev make gcc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

say "building Citus $CITUS_VERSION for PostgreSQL $major (about a minute)"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
tar -xzf "$tarball" -C "$build" --strip-components=1
(
  cd "$build"
  ./configure -q PG_CONFIG="$pg_config" >/dev/null
  make -s -j"$(nproc)" >/dev/null
  sudo_ make -s install >/dev/null
) >&2
[ -f "$pkglibdir/citus.so" ] || { say "the build installed no citus.so"; exit 1; }
echo "$pg_config"
