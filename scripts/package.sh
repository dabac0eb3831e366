#!/usr/bin/env bash
# make package: a .deb that installs snowflake into Debian's (or PGDG's) postgresql-NN without a
# Rust toolchain. Built from `cargo pgrx package` (through scripts/cargo) for that major plus the
# scripts under sql/ (first release and upgrades), so ALTER EXTENSION ... UPDATE works from an
# installed package too.
#
# The files go where Debian's postgresql-NN looks for them, whatever server it was built against
# (the 16 and 18 here come from a relocatable build): the ABI of a major does not depend on where
# it is installed, only on its compile-time settings, which pgrx checks in the magic block.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_MAJOR=${PG_MAJOR:?run it as make package PG_MAJOR=NN}
PG_CONFIG=${PG_CONFIG:-$(scripts/pg.sh "$PG_MAJOR")}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
ARCH=$(dpkg --print-architecture)
NAME=postgresql-$PG_MAJOR-snowflake

scripts/cargo pgrx package --pg-config "$PG_CONFIG" --no-default-features --features "pg$PG_MAJOR" >/dev/null
tree=target/release/snowflake-pg$PG_MAJOR
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# mktemp makes its directory 0700; the package's root entry is what dpkg gives `/`.
chmod 755 "$stage"
libdir=$stage/usr/lib/postgresql/$PG_MAJOR/lib
extdir=$stage/usr/share/postgresql/$PG_MAJOR/extension
mkdir -p "$libdir" "$extdir"
install -m 644 "$tree$("$PG_CONFIG" --pkglibdir)/snowflake.so" "$libdir/"
install -m 644 "$tree$("$PG_CONFIG" --sharedir)"/extension/snowflake* "$extdir/"
install -m 644 sql/snowflake--*.sql "$extdir/"
mkdir -p "$stage/usr/share/doc/$NAME"
install -m 644 README.md "$stage/usr/share/doc/$NAME/"
# The library's own needs (a glibc at least as new as the one it was linked against, libgcc),
# computed by dpkg-shlibdeps from its symbols, beside the server it loads into.
shlibs=$(cd "$stage" && mkdir -p debian && printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$NAME" "$NAME" > debian/control &&
  dpkg-shlibdeps -O -e "usr/lib/postgresql/$PG_MAJOR/lib/snowflake.so" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
rm -rf "$stage/debian"
[ -n "$shlibs" ] || { echo "package: dpkg-shlibdeps found no dependencies for snowflake.so" >&2; exit 1; }
mkdir -p "$stage/DEBIAN"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: $NAME
Version: $VERSION
Architecture: $ARCH
Maintainer: snowflake developers <snowflake@localhost>
Depends: postgresql-$PG_MAJOR, $shlibs
Section: database
Priority: optional
Description: Twitter-style 64-bit Snowflake IDs for PostgreSQL $PG_MAJOR
 snowflake_nextval() generates time-ordered 64-bit IDs, unique across servers
 with distinct worker IDs; load it with shared_preload_libraries = 'snowflake'.
CONTROL
out=target/${NAME}_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group --build "$stage" "$out" >/dev/null
echo "$out"
