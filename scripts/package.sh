#!/usr/bin/env bash
# make package: a .deb that installs snowflake into Debian's (or PGDG's) postgresql-NN without a
# Rust toolchain. Built from `cargo pgrx package` (through scripts/cargo) for that major plus the
# scripts under sql/ (first release and upgrades), so ALTER EXTENSION ... UPDATE works from an
# installed package too.
#
# The files go where Debian's postgresql-NN looks for them, whatever server it was built against
# (the 16 and 18 here come from a relocatable build): the ABI of a major does not depend on where
# it is installed, only on its compile-time settings, which pgrx checks in the magic block.
#
# What makes it a package rather than a build artefact: a Debian revision ($DEB_REVISION), a
# maintainer ($DEB_MAINTAINER; the Makefile gives both defaults), the licence in DEP-5 form, a
# Debian changelog and the upstream one, the library stripped with its debug symbols in a
# separate postgresql-NN-snowflake-dbgsym package (found by build ID, as Debian's are), no path of
# the build machine (the Makefile's RUSTFLAGS and CFLAGS), and lintian clean (tests/package.rs
# runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/package-common.sh
umask 022
PG_MAJOR=${PG_MAJOR:?run it as make package PG_MAJOR=NN}
PG_CONFIG=${PG_CONFIG:-$(scripts/pg.sh "$PG_MAJOR")}
: "${RUSTFLAGS:?run it through make package, which gives the release build its RUSTFLAGS and CFLAGS}"
DEB_REVISION=${DEB_REVISION:?run it through make package, which gives DEB_REVISION a default}
DEB_MAINTAINER=${DEB_MAINTAINER:?run it through make package, which gives DEB_MAINTAINER a default}
[[ $DEB_REVISION =~ ^[0-9][0-9A-Za-z.+~]*$ ]] ||
  { echo "package: DEB_REVISION=$DEB_REVISION is not a Debian revision (a digit, then [0-9A-Za-z.+~])" >&2; exit 1; }
[[ $DEB_MAINTAINER =~ ^[^\<\>]+\ \<[^\<\>@\ ]+@[^\<\>@\ ]+\>$ ]] ||
  { echo "package: DEB_MAINTAINER=$DEB_MAINTAINER is not 'Full Name <address>'" >&2; exit 1; }
UPSTREAM=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
VERSION=$UPSTREAM-$DEB_REVISION
ARCH=$(dpkg --print-architecture)
NAME=postgresql-$PG_MAJOR-snowflake
# The changelog's date and the files' times: the last commit's, so that the same commit gives the
# same package. Not exported: cargo would rebuild what `make install` built (cc reads it).
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

tree=$(build_release "$PG_MAJOR" "$PG_CONFIG")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/pkg dbg=$stage/dbgsym
mkdir -p "$pkg" "$dbg"
libdir=$pkg/usr/lib/postgresql/$PG_MAJOR/lib
extdir=$pkg/usr/share/postgresql/$PG_MAJOR/extension
doc=$pkg/usr/share/doc/$NAME
mkdir -p "$libdir" "$extdir" "$doc" "$pkg/usr/share/lintian/overrides"
install -m 644 "$tree$("$PG_CONFIG" --pkglibdir)/snowflake.so" "$libdir/"
install -m 644 "$tree$("$PG_CONFIG" --sharedir)"/extension/snowflake* "$extdir/"
install -m 644 sql/snowflake--*.sql "$extdir/"
install -m 644 README.md "$doc/"
# The query file for prometheus-postgres-exporter (docs/operations.md, "Monitoring").
install -D -m 644 monitoring/prometheus-postgres-exporter.yaml "$doc/examples/prometheus-postgres-exporter.yaml"
# Prometheus's alert rules on its metrics, and their unit tests (promtool test rules).
install -m 644 monitoring/snowflake.rules.yml monitoring/snowflake.rules.test.yml "$doc/examples/"
gzip -9n < CHANGELOG.md > "$doc/changelog.gz"

# The library stripped; its symbols and debug sections go into the -dbgsym package.
build_id=$(split_debug "$libdir/snowflake.so" "$dbg")

# The licence, in Debian's machine-readable form (DEP-5): the MIT licence of LICENSE, which
# Debian calls Expat, and a paragraph for each Rust crate linked into the library with its
# licence texts (scripts/crate-licenses.py says which crates and which texts).
copyright=$(sed -n 's/^Copyright (c) //p' LICENSE)
[ -n "$copyright" ] || { echo "package: LICENSE has no 'Copyright (c)' line" >&2; exit 1; }
crates=$(scripts/crate-licenses.py dep5 "$PG_MAJOR")
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: snowflake"
  echo "Comment: The library statically links the Rust crates of the Files: cargo-registry/"
  echo " paragraphs below, each with its licence texts as it ships them."
  echo
  echo "Files: *"
  echo "Copyright: $copyright"
  echo "License: Expat"
  echo
  echo "$crates"
  echo "License: Expat"
  # LICENSE from its permission notice on, a blank line written as " ." (DEP-5).
  sed -n '/^Permission is hereby granted/,$p' LICENSE | sed 's/^$/./; s/^/ /'
} > "$doc/copyright"

# The Debian changelog: this package of this upstream version.
{
  echo "$NAME ($VERSION) unstable; urgency=medium"
  echo
  echo "  * snowflake $UPSTREAM for PostgreSQL $PG_MAJOR (what changed: changelog.gz)."
  echo
  echo " -- $DEB_MAINTAINER  $(date -u -R -d "@$epoch")"
} | gzip -9n > "$doc/changelog.Debian.gz"

# What lintian says that does not apply here, each with the reason (lintian reads this file;
# tests/package.rs checks that every override has its reason above it).
cat > "$pkg/usr/share/lintian/overrides/$NAME" <<OVERRIDES
# Debian's archive wants a first upload to close its ITP bug; this package is built by its
# users and published by them, never uploaded to Debian, so there is no bug to close.
$NAME: initial-upload-closes-no-bugs
OVERRIDES

# Removing the package leaves every cluster's configuration as the DBA wrote it, but a server
# whose shared_preload_libraries still names snowflake does not start once the library is gone:
# prerm says which file and line name it (Debian's clusters: /etc/postgresql/NN/*, and
# postgresql.auto.conf in each data directory). A server that runs keeps the library loaded
# until its next restart.
mkdir -p "$pkg/DEBIAN"
cat > "$pkg/DEBIAN/prerm" <<PRERM
#!/bin/sh
set -e
if [ "\$1" = remove ]; then
  for conf in /etc/postgresql/$PG_MAJOR/*/postgresql.conf; do
    [ -f "\$conf" ] || continue
    data=\$(sed -n "s/^[[:space:]]*data_directory[[:space:]]*=[[:space:]]*'\\(.*\\)'.*/\\1/p" "\$conf" | tail -n 1)
    for f in "\$conf" "\${conf%/postgresql.conf}"/conf.d/*.conf "\$data/postgresql.auto.conf"; do
      [ -f "\$f" ] || continue
      grep -n "^[[:space:]]*shared_preload_libraries[[:space:]]*=.*snowflake" "\$f" | while IFS=: read -r line _; do
        echo "$NAME: \$f:\$line names snowflake in shared_preload_libraries: take it out before that server's next restart, or it will not start." >&2
      done
    done
  done
fi
exit 0
PRERM
chmod 755 "$pkg/DEBIAN/prerm"

# The library's own needs (a glibc at least as new as the one it was linked against, libgcc),
# computed by dpkg-shlibdeps from its symbols, beside the server it loads into.
shlibs=$(cd "$pkg" && mkdir -p debian && printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$NAME" "$NAME" > debian/control &&
  dpkg-shlibdeps -O -e "usr/lib/postgresql/$PG_MAJOR/lib/snowflake.so" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
rm -rf "$pkg/debian"
[ -n "$shlibs" ] || { echo "package: dpkg-shlibdeps found no dependencies for snowflake.so" >&2; exit 1; }

# DEBIAN/: the control file and md5sums, for the package and its -dbgsym.
control() { # root package-name fields...
  local root=$1
  mkdir -p "$root/DEBIAN"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
  chmod 644 "$root/DEBIAN/md5sums"
  {
    echo "Package: $2"
    echo "Version: $VERSION"
    echo "Architecture: $ARCH"
    echo "Maintainer: $DEB_MAINTAINER"
    # dpkg-gencontrol's sum: each file's and directory's size in KiB, rounded up.
    echo "Installed-Size: $(cd "$root" && find . -path ./DEBIAN -prune -o \( -type f -o -type d -o -type l \) -printf '%s\n' |
      awk '{ n += int(($1 + 1023) / 1024) } END { print n }')"
    shift 2
    printf '%s\n' "$@"
  } > "$root/DEBIAN/control"
  chmod 644 "$root/DEBIAN/control"
}
control "$pkg" "$NAME" \
  "Depends: postgresql-$PG_MAJOR, $shlibs" \
  "Section: database" \
  "Priority: optional" \
  "Description: Twitter-style 64-bit Snowflake IDs for PostgreSQL $PG_MAJOR" \
  " snowflake_nextval() generates time-ordered 64-bit IDs, unique across servers" \
  " with distinct worker IDs; load it with shared_preload_libraries = 'snowflake'."
mkdir -p "$dbg/usr/share/doc"
ln -s "$NAME" "$dbg/usr/share/doc/$NAME-dbgsym"
control "$dbg" "$NAME-dbgsym" \
  "Depends: $NAME (= $VERSION)" \
  "Section: debug" \
  "Priority: optional" \
  "Auto-Built-Package: debug-symbols" \
  "Build-Ids: $build_id" \
  "Description: debug symbols for $NAME"

out=$target_dir/${NAME}_${VERSION}_${ARCH}.deb
dbgout=$target_dir/${NAME}-dbgsym_${VERSION}_${ARCH}.deb
SOURCE_DATE_EPOCH=$epoch dpkg-deb --root-owner-group --build "$pkg" "$out" >/dev/null
SOURCE_DATE_EPOCH=$epoch dpkg-deb --root-owner-group --build "$dbg" "$dbgout" >/dev/null
echo "$out"
echo "$dbgout"
