#!/usr/bin/env bash
# scripts/pgedge.sh PG_CONFIG: builds pgEdge's snowflake extension 2.6.0 for that server and prints
# the bin directory of a private copy of the server that has it installed (tests/from_pgedge.rs).
# pgEdge's extension is also named `snowflake` (snowflake.so, snowflake.control): it cannot sit
# beside this one in one installation. So the copy holds the server's bin, lib and share
# directories under ${SNOWFLAKE_TEST_DIR:-/tmp/snowflake-tests}/pgedge-2.6.0/<key>/root (where
# the servers' user can read them), at their own paths below it (PostgreSQL finds its lib and
# share relative to its bin); a second call costs nothing.
# scripts/pgedge.sh --source: finds (or downloads) and checks the source, prints its path.
#
# The source is the `git archive` of pgEdge's tag v2.6.0 (PostgreSQL licence), the first of:
#   1. $SNOWFLAKE_PGEDGE_TARBALL, which must then exist;
#   2. ../shared/pgedge/snowflake-2.6.0.tar.gz beside the project;
#   3. ${XDG_CACHE_HOME:-~/.cache}/snowflake/pgedge-snowflake-2.6.0.tar.gz, where a download of
#      GitHub's archive of the tag is kept once it passes the check.
# The check is the sha256 of the uncompressed tar, as scripts/citus.sh does: the tar that
# `git archive --format=tar --prefix=snowflake-2.6.0/ v2.6.0` writes (commit
# f888a97ec7a4550bf26085507694574e2385d459), which GitHub serves for a tag.
set -euo pipefail
if [ -n "${SNOWFLAKE_PGEDGE_TARBALL:-}" ]; then SNOWFLAKE_PGEDGE_TARBALL=$(realpath -m "$SNOWFLAKE_PGEDGE_TARBALL"); fi
cd "$(dirname "$0")/.."
pg_config=${1:?usage: scripts/pgedge.sh PG_CONFIG | --source}
VERSION=2.6.0
TAR_SHA256=8116ed49643228d0c712c8ac1e0a78975396d9e0d734d29454d280a57cfc35a6
URL=https://github.com/pgEdge/snowflake/archive/refs/tags/v$VERSION.tar.gz
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/snowflake
TARBALL=$CACHE/pgedge-snowflake-$VERSION.tar.gz

say() { echo "pgedge: $*" >&2; }

# Whether the .tar.gz $1 holds the pinned tar; unpacked into $2 when given.
checks() {
  local tar=${2:-$(mktemp)} ok=1
  if gzip -dc "$1" >"$tar" 2>/dev/null &&
     echo "$TAR_SHA256  $tar" | sha256sum --check --quiet >/dev/null 2>&1; then ok=0; fi
  [ -n "${2:-}" ] || rm -f "$tar"
  return $ok
}

get_it() {
  say "$1. Download $URL"
  say "and put it at ../shared/pgedge/snowflake-$VERSION.tar.gz beside the project or at $TARBALL,"
  say "or set SNOWFLAKE_PGEDGE_TARBALL to its path."
  exit 1
}

source_tarball() {
  local t
  for t in "${SNOWFLAKE_PGEDGE_TARBALL:-}" "../shared/pgedge/snowflake-$VERSION.tar.gz" "$TARBALL"; do
    [ -n "$t" ] || continue
    if [ -f "$t" ]; then
      checks "$t" || get_it "$t is not pgEdge snowflake $VERSION's source (its tar's sha256 is not $TAR_SHA256)"
      realpath "$t"
      return
    fi
    [ "$t" != "${SNOWFLAKE_PGEDGE_TARBALL:-}" ] || get_it "SNOWFLAKE_PGEDGE_TARBALL=$t does not exist"
  done
  say "downloading $URL into $TARBALL"
  mkdir -p "$CACHE"
  local part=$TARBALL.$$.partial
  if command -v curl >/dev/null; then
    curl -fsSL --connect-timeout 30 --retry 2 -o "$part" "$URL" || true
  else
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
      "$URL" "$part" 2>/dev/null || true
  fi
  [ -s "$part" ] || { rm -f "$part"; get_it "the download failed"; }
  checks "$part" || { rm -f "$part"; get_it "the download is not the source this project pins (sha256 of its tar)"; }
  mv -f "$part" "$TARBALL"
  echo "$TARBALL"
}

if [ "$pg_config" = --source ]; then source_tarball; exit 0; fi

bindir=$("$pg_config" --bindir)
pkglibdir=$("$pg_config" --pkglibdir)
sharedir=$("$pg_config" --sharedir)
key=$(printf '%s %s' "$bindir" "$("$pg_config" --version)" | sha256sum | cut -c1-16)
dest=${SNOWFLAKE_TEST_DIR:-/tmp/snowflake-tests}/pgedge-$VERSION/$key
mkdir -p "$(dirname "$dest")"
# One build at a time per server: a second caller waits, then finds it made.
exec 9>"$dest.lock"
flock 9
if [ -f "$dest/done" ]; then echo "$dest/root$bindir"; exit 0; fi

tarball=$(source_tarball)
say "building pgEdge snowflake $VERSION for $("$pg_config" --version) into a copy of its server"
rm -rf "$dest"
mkdir -p "$dest/root"
# The server's programs, libraries and shared files at their own paths under root/, without
# this project's extension.
for d in "$bindir" "$pkglibdir" "$sharedir"; do
  [ -d "$dest/root$d" ] && continue
  mkdir -p "$dest/root$(dirname "$d")"
  cp -a "$d" "$dest/root$d"
done
rm -f "$dest/root$pkglibdir/snowflake.so" "$dest/root$sharedir"/extension/snowflake[.-]*
mkdir "$dest/src"
checks "$tarball" "$dest/src.tar" || get_it "$tarball changed while it was read"
tar -xf "$dest/src.tar" -C "$dest/src" --strip-components=1
rm -f "$dest/src.tar"
(
  cd "$dest/src"
  make -s USE_PGXS=1 PG_CONFIG="$pg_config" >/dev/null
  make -s USE_PGXS=1 PG_CONFIG="$pg_config" DESTDIR="$dest/root" install >/dev/null
) >&2
[ -f "$dest/root$pkglibdir/snowflake.so" ] || { say "the build installed no snowflake.so"; exit 1; }
# Readable by the servers' user (the tests run them as postgres).
chmod -R a+rX "$dest"
touch "$dest/done"
echo "$dest/root$bindir"
