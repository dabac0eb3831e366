#!/usr/bin/env bash
# make reproducible PG_MAJOR=NN: the same commit gives byte-identical packages (issue 63). The
# committed HEAD is cloned twice into directories of different names and lengths, and each clone
# runs `make package rpm` from nothing: the first in its own target/, in UTC, the second with
# CARGO_TARGET_DIR elsewhere, in another time zone and with another umask, later. Every .deb and
# RPM of the first must be byte for byte the second's (cmp); where one differs, diffoscope (if
# installed) or the differing files of their contents say where.
#
# The two builds share no build cache (each has its own target directory, built from scratch:
# a cache could hide a difference that a build from nothing would make, and a user's build is
# from nothing), only cargo's registry of downloaded sources, which the build maps to
# /usr/src/cargo. Uncommitted changes are not built: commit first. About two release builds of
# the major (10 to 15 minutes on two cores).
set -euo pipefail
cd "$(dirname "$0")/.."
PG_MAJOR=${PG_MAJOR:?run it as make reproducible PG_MAJOR=NN}
PG_CONFIG=${PG_CONFIG:-$(scripts/pg.sh "$PG_MAJOR")}
commit=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "reproducible: the working tree has uncommitted changes; this builds HEAD ($commit) as committed" >&2
fi
work=$(mktemp -d /tmp/snowflake-reproducible.XXXXXX)
[ -n "${SNOWFLAKE_KEEP_REPRODUCIBLE:-}" ] || trap 'rm -rf "$work"' EXIT

# One clone of HEAD, and its packages: build NAME TARGET_DIR TZ UMASK (TARGET_DIR empty: its target/).
build() {
  local dir=$work/$1 out=$work/$1.packages target
  git clone --quiet --shared --no-checkout "$PWD" "$dir"
  git -C "$dir" checkout --quiet --detach "$commit"
  target=${2:-$dir/target}
  echo "reproducible: building $commit in $dir (target directory $target, TZ=$3, umask $4)" >&2
  # Its own make, without this one's variables, and with none of this shell's build flags.
  (cd "$dir" && umask "$4" && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u RUSTFLAGS -u CFLAGS \
    -u CARGO_TARGET_DIR -u SOURCE_DATE_EPOCH ${2:+CARGO_TARGET_DIR="$2"} TZ="$3" \
    make --no-print-directory package rpm PG_MAJOR="$PG_MAJOR" PG_CONFIG="$PG_CONFIG" >&2)
  mkdir -p "$out"
  cp "$target"/*.deb "$target"/*.rpm "$out/"
}
build a "" UTC 022
build clone-of-the-same-commit-b "$work/elsewhere/target" Pacific/Kiritimati 027

status=0
names=$(cd "$work/a.packages" && ls)
[ "$names" = "$(cd "$work/clone-of-the-same-commit-b.packages" && ls)" ] ||
  { echo "reproducible: the two builds made other files:" >&2; diff <(echo "$names") <(ls "$work/clone-of-the-same-commit-b.packages") >&2 || true; exit 1; }
for f in $names; do
  a=$work/a.packages/$f b=$work/clone-of-the-same-commit-b.packages/$f
  if cmp -s "$a" "$b"; then
    echo "reproducible: $f: identical ($(sha256sum < "$a" | cut -c1-16)...)"
  else
    status=1
    echo "reproducible: $f DIFFERS between the two builds" >&2
    if command -v diffoscope >/dev/null; then
      diffoscope --text - "$a" "$b" >&2 || true
    else
      # What differs: the headers and file lists (times, owners, modes), then the files.
      case $f in
        *.deb) list() { dpkg-deb -I "$1"; dpkg-deb -c "$1"; } ;;
        *.rpm) list() { rpm -qpi --dump --nosignature "$1"; } ;;
      esac
      diff <(list "$a") <(list "$b") >&2 || true
      for p in "$a" "$b"; do
        mkdir -p "$p.x"
        case $f in
          *.deb) dpkg-deb -R "$p" "$p.x" ;;
          *.rpm) (cd "$p.x" && rpm2cpio "$p" | cpio -idm --quiet) ;;
        esac
      done
      diff -r "$a.x" "$b.x" >&2 || true
    fi
  fi
done
[ $status = 0 ] && echo "reproducible: every package of PostgreSQL $PG_MAJOR is byte-identical in both builds"
exit $status
