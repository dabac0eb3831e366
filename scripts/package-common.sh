# Sourced by scripts/package.sh (.deb) and scripts/rpm.sh (RPM): what both packages do alike.

# Cargo's target directory, where the build is and the packages go: $CARGO_TARGET_DIR where it is
# set (relative to the workspace, as cargo and the Makefile take it), else target/.
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")

# The release build of this major, through cargo pgrx package: its files under
# $target_dir/release/snowflake-pgNN/<the server's own paths> (printed).
#
# cargo-pgrx writes the extension's script (snowflake--<version>.sql) in one of several valid
# orders of its dependency graph, a different one from run to run (issue 63): the script is
# written again in the one order of tools/sql-order (which says why and how), from the schema
# section pgrx embeds in the library, so that the same library gives the same script.
build_release() { # major pg_config
  scripts/cargo pgrx package --pg-config "$2" --no-default-features --features "pg$1" >/dev/null
  local tree=$target_dir/release/snowflake-pg$1 version section
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
  section=$(mktemp)
  objcopy -O binary --only-section=.pgrxsc "$tree$("$2" --pkglibdir)/snowflake.so" "$section"
  # A build tool, not shipped: a debug build without the release's flags.
  env -u RUSTFLAGS -u CFLAGS scripts/cargo run --quiet -p snowflake-sql-order -- \
    "$section" snowflake.control "$version" "$tree$("$2" --sharedir)/extension/snowflake--$version.sql" ||
    { rm -f "$section"; return 1; }
  rm -f "$section"
  echo "$tree"
}

# The library stripped as Debian's dh_strip (and rpm's find-debuginfo) does; its symbols and debug
# sections go into DEBUG_ROOT/usr/lib/debug/.build-id/xx/rest.debug, the file gdb looks up by the
# build ID. Prints the build ID.
split_debug() { # library debug-root
  local so=$1 build_id debug
  build_id=$(readelf -n "$so" | sed -n 's/^ *Build ID: *\([0-9a-f]*\)$/\1/p')
  [ ${#build_id} -gt 2 ] || { echo "package: snowflake.so has no build ID" >&2; return 1; }
  debug=$2/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
  mkdir -p "$(dirname "$debug")"
  objcopy --only-keep-debug --compress-debug-sections "$so" "$debug"
  chmod 644 "$debug"
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$so"
  (cd "$(dirname "$debug")" && objcopy --add-gnu-debuglink="$(basename "$debug")" "$so")
  echo "$build_id"
}
