#!/usr/bin/env bash
# scripts/check-major.sh NN: type-checks the extension for PostgreSQL major NN without a server
# of that major (none with headers can be installed here for 14 or 17).
#
# pgrx-pg-sys ships bindings for every major pre-generated under src/include/, for docs.rs: its
# build script returns early when DOCS_RS=1 (so no pg_config and no bindgen), and include.rs
# takes the shipped file under `cfg(docsrs)`. Setting that cfg for every crate through RUSTFLAGS
# breaks proc-macro2, so a rustc wrapper adds it to pgrx-pg-sys alone. `cargo check` does not
# link, so the C shim the build script would have compiled is not needed.
set -euo pipefail
cd "$(dirname "$0")/.."
major=${1:?usage: scripts/check-major.sh MAJOR}
echo "== compile check for PostgreSQL $major (pgrx-pg-sys's shipped bindings)"
DOCS_RS=1 RUSTC_WRAPPER="$PWD/scripts/rustc-docsrs.sh" \
  cargo check --quiet --lib --no-default-features --features "pg$major" --target-dir target/check
