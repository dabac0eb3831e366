#!/usr/bin/env bash
# RUSTC_WRAPPER for scripts/check-major.sh: `--cfg docsrs` for pgrx-pg-sys only.
rustc=$1
shift
for arg in "$@"; do
  if [ "$arg" = pgrx_pg_sys ]; then exec "$rustc" "$@" --cfg docsrs; fi
done
exec "$rustc" "$@"
