#!/usr/bin/env bash
# make package: a .deb that installs snowflake into Debian's PostgreSQL without a Rust
# toolchain. Built from `cargo pgrx package` plus the scripts under sql/ (first release and
# upgrades), so ALTER EXTENSION ... UPDATE works from an installed package too.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_MAJOR=${PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
ARCH=$(dpkg --print-architecture)
NAME=postgresql-$PG_MAJOR-snowflake

cargo pgrx package --pg-config "$PG_CONFIG" >/dev/null
tree=target/release/snowflake-pg$PG_MAJOR
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -a "$tree/." "$stage/"
extdir="$stage$("$PG_CONFIG" --sharedir)/extension"
install -m 644 sql/snowflake--*.sql "$extdir/"
mkdir -p "$stage/usr/share/doc/$NAME"
install -m 644 README.md "$stage/usr/share/doc/$NAME/"
mkdir -p "$stage/DEBIAN"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: $NAME
Version: $VERSION
Architecture: $ARCH
Maintainer: snowflake developers <snowflake@localhost>
Depends: postgresql-$PG_MAJOR, libc6
Section: database
Priority: optional
Description: Twitter-style 64-bit Snowflake IDs for PostgreSQL $PG_MAJOR
 snowflake_nextval() generates time-ordered 64-bit IDs, unique across servers
 with distinct worker IDs; load it with shared_preload_libraries = 'snowflake'.
CONTROL
out=target/${NAME}_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group --build "$stage" "$out" >/dev/null
echo "$out"
