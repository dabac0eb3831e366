#!/usr/bin/env bash
# make previous-package: the previous release's .deb for this major, built once from that release's
# commit (PREVIOUS_COMMIT, the Makefile's) by its own `make package`, into
# target/previous/postgresql-NN-snowflake_<release>_<arch>.deb (under $CARGO_TARGET_DIR where it is set). tests/package.rs installs it into
# Debian's server with dpkg and upgrades it to this build's package.
#
# The release's source comes from this repository's history (git archive), so a clean clone
# builds it without the network; its build is a release build of its own (about 5 minutes on two
# cores, once per machine and major: the .deb is kept, the build tree is removed).
set -euo pipefail
cd "$(dirname "$0")/.."
PG_MAJOR=${PG_MAJOR:?run it as make previous-package PG_MAJOR=NN}
PG_CONFIG=${PG_CONFIG:-$(scripts/pg.sh "$PG_MAJOR")}
: "${PREVIOUS_RELEASE:?run it through make previous-package}" "${PREVIOUS_COMMIT:?run it through make previous-package}"
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out=$target_dir/previous/postgresql-$PG_MAJOR-snowflake_${PREVIOUS_RELEASE}_$(dpkg --print-architecture).deb
[ -f "$out" ] && { echo "$out"; exit 0; }
if ! git cat-file -e "$PREVIOUS_COMMIT^{commit}" 2>/dev/null; then
  # A shallow clone lacks the release's commit: no package, and the test that upgrades from it
  # says SKIPPED (tests/package.rs); any other clone without it is broken.
  if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    echo "previous-package: WARNING: this shallow clone lacks commit $PREVIOUS_COMMIT ($PREVIOUS_RELEASE): no previous package (git fetch --unshallow to build it)" >&2
    exit 0
  fi
  echo "previous-package: commit $PREVIOUS_COMMIT ($PREVIOUS_RELEASE) is not in this clone" >&2
  exit 1
fi
[ "$(git show "$PREVIOUS_COMMIT:Cargo.toml" | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)" = "$PREVIOUS_RELEASE" ] ||
  { echo "previous-package: Cargo.toml of $PREVIOUS_COMMIT is not version $PREVIOUS_RELEASE" >&2; exit 1; }
src=$target_dir/previous/src-$PG_MAJOR
rm -rf "$src"
mkdir -p "$src"
trap 'rm -rf "$src"' EXIT
git archive "$PREVIOUS_COMMIT" | tar -x -C "$src"
echo "previous-package: building snowflake $PREVIOUS_RELEASE for PostgreSQL $PG_MAJOR (once; a release build)" >&2
# Its own make, without this make's variables (MAKEFLAGS would carry PG_MAJOR's origin and more),
# and in its own target/: its scripts know no other.
env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u RUSTFLAGS -u CFLAGS -u CARGO_TARGET_DIR \
  make -C "$src" --no-print-directory package PG_MAJOR="$PG_MAJOR" PG_CONFIG="$PG_CONFIG" >&2
built=$src/target/$(basename "$out")
[ -f "$built" ] || { echo "previous-package: $built was not built" >&2; exit 1; }
[ "$(dpkg-deb -f "$built" Version)" = "$PREVIOUS_RELEASE" ] ||
  { echo "previous-package: $built is not version $PREVIOUS_RELEASE" >&2; exit 1; }
mv "$built" "$out"
echo "$out"
