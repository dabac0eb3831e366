//! snowflake: Twitter-style 64-bit Snowflake IDs generated inside PostgreSQL.
//!
//! `core` is the crate `snowflake-core` (core/): plain Rust with no pgrx, the layout, the clock
//! and sequence policy, the lease, fleet and horizon rules. Everything here is the thin pgrx glue
//! that reads settings, takes the LWLock, calls the core and reports errors.

pub use snowflake_core as core;

mod api;
mod as_owner;
mod citus;
mod codec;
mod config;
mod errors;
mod fleet;
mod generator;
mod guard;
mod horizon;
mod lease;
mod partitions;
mod session;
mod status;
mod syncrep;

// The magic block says which server the library was built for. From PostgreSQL 18 it also
// carries a name and a version that `pg_get_loaded_modules()` shows. pgrx 0.18.1's bare
// `version` key stores the version in the name field, so both are given explicitly.
::pgrx::pg_module_magic!(name = c"snowflake", version = env_cstr::VERSION);

// First in the install script: the schema it goes into must be a superuser's (issue 49).
::pgrx::extension_sql_file!("schema_check.sql", name = "schema_check", bootstrap);

mod env_cstr {
    use std::ffi::CStr;

    const RAW: &str = env!("CARGO_PKG_VERSION");
    const BYTES: [u8; RAW.len() + 1] = {
        let mut buf = [0u8; RAW.len() + 1];
        let mut i = 0;
        while i < RAW.len() {
            buf[i] = RAW.as_bytes()[i];
            i += 1;
        }
        buf
    };
    /// The crate's version (which is the extension's) as a C string, at compile time.
    pub const VERSION: &CStr = match CStr::from_bytes_with_nul(&BYTES) {
        Ok(s) => s,
        Err(_) => panic!("CARGO_PKG_VERSION has a NUL byte"),
    };
}

/// Runs when the library is loaded: in the postmaster when it is in `shared_preload_libraries`
/// (settings, shared memory, the lease worker), otherwise in the one backend that loads it (pure
/// functions only).
#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    if !unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        config::init_unpreloaded();
        return;
    }
    // Rust's backtraces would go to clients in the DETAIL of an error that passes through a
    // panic (pgrx adds one when these are set in the server's environment): forgotten here, in
    // the postmaster, before any process of the server can capture one.
    // SAFETY: the postmaster is single-threaded while shared_preload_libraries is processed.
    std::env::remove_var("RUST_BACKTRACE");
    std::env::remove_var("RUST_LIB_BACKTRACE");
    config::init_preloaded();
    generator::init();
    citus::init();
    if config::track_horizon() {
        horizon::init();
    }
    // pg_upgrade runs the new server in binary-upgrade mode and then restores the old cluster's
    // schema, `_snowflake` and its lease included: a worker creating them first would make the
    // restore fail, and no ID is generated during an upgrade anyway.
    if !unsafe { pgrx::pg_sys::IsBinaryUpgrade } {
        lease::register();
        citus::register();
    }
}
