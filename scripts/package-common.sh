# Sourced by scripts/package.sh (.deb) and scripts/rpm.sh (RPM): what both packages do alike.

# The release build of this major, through cargo pgrx package: its files under
# target/release/snowflake-pgNN/<the server's own paths>.
build_release() { # major pg_config
  scripts/cargo pgrx package --pg-config "$2" --no-default-features --features "pg$1" >/dev/null
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
