//! snowflake: Twitter-style 64-bit Snowflake IDs generated inside PostgreSQL.
//!
//! `core` is plain Rust (layout, clock + sequence policy, time parsing); everything else is the
//! thin pgrx glue that reads settings, takes the LWLock, calls the core and reports errors.

pub mod core;

mod api;
mod config;
mod errors;
mod lease;
mod shmem;
mod status;

::pgrx::pg_module_magic!(name, version);

/// Runs when the library is loaded: in the postmaster when it is in `shared_preload_libraries`
/// (settings, shared memory), otherwise in the one backend that loads it (pure functions only).
#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    config::init();
}
