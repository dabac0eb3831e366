//! The one generator of this server: a `State` in shared memory under a PostgreSQL LWLock, so
//! every backend and parallel worker shares one last timestamp and one sequence.

use crate::core::generator::State;
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use pgrx::{pg_shmem_init, pg_sys};

#[derive(Clone, Copy, Default)]
#[repr(C)]
pub struct Shared {
    pub state: State,
}

// SAFETY: plain old data with no pointers, valid in any process that maps the segment.
unsafe impl PGRXSharedMemory for Shared {}

pub static GENERATOR: PgLwLock<Shared> = unsafe { PgLwLock::new(c"snowflake_generator") };

/// Requests the segment and the LWLock; only valid while shared_preload_libraries is processed.
pub fn init() {
    pg_shmem_init!(GENERATOR);
}
