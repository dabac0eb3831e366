#!/usr/bin/env bash
# scripts/citus.sh NN: builds Citus 14.0.1 into PostgreSQL major NN's server (see scripts/pg.sh)
# unless that version is installed there already, and prints the server's pg_config. The tests and
# the benchmark call it; a second call costs nothing. Citus 14 supports PostgreSQL 16, 17 and 18;
# for another major this prints why and exits with status 3, the only status that means "does not
# run here": a missing or altered source fails (status 1), so the Citus tests never pass unrun.
# scripts/citus.sh --source: finds (or downloads) and checks the source, prints its path, builds
# nothing (to fetch it ahead of a run).
#
# The source is the `git archive` of Citus's tag v14.0.1 (AGPL-3.0), the first of:
#   1. $SNOWFLAKE_CITUS_TARBALL, which must then exist;
#   2. ../shared/citus/citus-14.0.1.tar.gz beside the project (the project's shared material);
#   3. ${XDG_CACHE_HOME:-~/.cache}/snowflake/citus-14.0.1.tar.gz, where a download of GitHub's
#      archive of the tag is kept once it passes the check.
# The check is the sha256 of the uncompressed tar, not of the .tar.gz. That tar is what
# `git archive --format=tar --prefix=citus-14.0.1/ v14.0.1` writes: the shared copy's tar is
# byte for byte what git 2.47 writes from Citus's repository (its pax header names the tag's
# commit, d5731d775cde45b61e541a393889a64bf4772d14). Its gzip layer is `gzip -n -9` of that tar
# (the .tar.gz's sha256 is 26ddb8ec9de07c5fa8426e435d10936e5cd6bed01a5ad94aab92e818081e5ec9), and
# a compressor's bytes are not something to pin. GitHub's download itself was never compared
# (github.com could not be reached where this was written): GitHub serves `git archive` output for
# tags, so its tar should be the same; if it is not, the check fails and says how to get the source.
set -euo pipefail
# Debian's apt-get, one at a time (scripts/apt-get says why).
APT_GET=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt-get
# A relative $SNOWFLAKE_CITUS_TARBALL names a file from where the script was called.
if [ -n "${SNOWFLAKE_CITUS_TARBALL:-}" ]; then SNOWFLAKE_CITUS_TARBALL=$(realpath -m "$SNOWFLAKE_CITUS_TARBALL"); fi
cd "$(dirname "$0")/.."
major=${1:?usage: scripts/citus.sh MAJOR | --source}
CITUS_VERSION=14.0.1
# sha256 of the tar inside the .tar.gz (see above).
CITUS_TAR_SHA256=9365b2262e01f688f7126867e297bda2ac7f8cd15ad1d5f2e15ad6af45ab0878
CITUS_URL=https://github.com/citusdata/citus/archive/refs/tags/v$CITUS_VERSION.tar.gz
CITUS_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/snowflake/citus-$CITUS_VERSION.tar.gz
# The version of Citus's SQL objects that 14.0.1 installs (its citus.control).
CITUS_SQL_VERSION=14.0-1

say() { echo "citus: $*" >&2; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Whether the .tar.gz $1 holds the pinned tar; unpacked into $2 when given.
checks() {
  local tar=${2:-$(mktemp)} ok=1
  if gzip -dc "$1" >"$tar" 2>/dev/null &&
     echo "$CITUS_TAR_SHA256  $tar" | sha256sum --check --quiet >/dev/null 2>&1; then ok=0; fi
  [ -n "${2:-}" ] || rm -f "$tar"
  return $ok
}

get_it() {
  say "$1. Download $CITUS_URL"
  say "and put it at ../shared/citus/citus-$CITUS_VERSION.tar.gz beside the project or at $CITUS_CACHE,"
  say "or set SNOWFLAKE_CITUS_TARBALL to its path."
  exit 1
}

# Prints the path of a checked source, downloading it into the cache where there is none.
source_tarball() {
  local t
  for t in "${SNOWFLAKE_CITUS_TARBALL:-}" "../shared/citus/citus-$CITUS_VERSION.tar.gz" "$CITUS_CACHE"; do
    [ -n "$t" ] || continue
    if [ -f "$t" ]; then
      checks "$t" || get_it "$t is not Citus $CITUS_VERSION's source (its tar's sha256 is not $CITUS_TAR_SHA256)"
      realpath "$t"
      return
    fi
    [ "$t" != "${SNOWFLAKE_CITUS_TARBALL:-}" ] || get_it "SNOWFLAKE_CITUS_TARBALL=$t does not exist"
  done
  say "downloading $CITUS_URL into $CITUS_CACHE"
  mkdir -p "$(dirname "$CITUS_CACHE")"
  local part=$CITUS_CACHE.$$.partial
  if command -v curl >/dev/null; then
    curl -fsSL --connect-timeout 30 --retry 2 -o "$part" "$CITUS_URL" || true
  elif command -v wget >/dev/null; then
    wget -q -O "$part" "$CITUS_URL" || true
  else
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
      "$CITUS_URL" "$part" 2>/dev/null || true
  fi
  [ -s "$part" ] || { rm -f "$part"; get_it "the download failed"; }
  checks "$part" || { rm -f "$part"; get_it "the download is not the source this project pins (sha256 of its tar)"; }
  mv -f "$part" "$CITUS_CACHE"
  echo "$CITUS_CACHE"
}

if [ "$major" = --source ]; then source_tarball; exit 0; fi

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

tarball=$(source_tarball)
# Build dependencies (Debian 12's names); libkrb5-dev because the servers' headers include GSSAPI.
missing=()
for p in libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev make gcc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  "$APT_GET" install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

say "building Citus $CITUS_VERSION for PostgreSQL $major (about a minute)"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# Built from the very tar that was checked.
checks "$tarball" "$build/citus.tar" || get_it "$tarball changed while it was read"
mkdir "$build/src"
tar -xf "$build/citus.tar" -C "$build/src" --strip-components=1
rm -f "$build/citus.tar"
(
  cd "$build/src"
  ./configure -q PG_CONFIG="$pg_config" >/dev/null
  make -s -j"$(nproc)" >/dev/null
  sudo_ make -s install >/dev/null
) >&2
[ -f "$pkglibdir/citus.so" ] || { say "the build installed no citus.so"; exit 1; }
echo "$pg_config"
