//! The one generator of this server: a `State` in shared memory under a PostgreSQL LWLock, so
//! every backend and parallel worker shares one last timestamp and one sequence.

use crate::core::generator::State;
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use pgrx::{pg_shmem_init, pg_sys};

#[derive(Clone, Copy)]
#[repr(C)]
pub struct Shared {
    pub state: State,
    /// The lease worker's latch (an address inside shared memory, the same in every process),
    /// set by a backend that needs a lease renewed now; 0 while no worker has started.
    pub worker_latch: usize,
    pub worker_pid: i32,
    /// IDs issued when the worker last renewed, to tell an idle server from a busy one.
    pub issued_at_renewal: u64,
}

impl Default for Shared {
    fn default() -> Self {
        let mut state = State::new();
        // Nothing may be issued until the lease worker has read the persisted high-water mark
        // and written a lease above it.
        state.lease_ms = 0;
        Shared {
            state,
            worker_latch: 0,
            worker_pid: 0,
            issued_at_renewal: 0,
        }
    }
}

// SAFETY: plain old data; the one address in it points into shared memory itself.
unsafe impl PGRXSharedMemory for Shared {}

pub static GENERATOR: PgLwLock<Shared> = unsafe { PgLwLock::new(c"snowflake_generator") };

/// Requests the segment and the LWLock; only valid while shared_preload_libraries is processed.
pub fn init() {
    pg_shmem_init!(GENERATOR);
}

/// Wakes the lease worker, if one runs. Called with no lock held.
pub fn wake_worker() {
    let latch = GENERATOR.share().worker_latch;
    if latch != 0 {
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}
