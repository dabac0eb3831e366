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
    /// The other server's claim while `state.refused` is set (see `fleet.rs`).
    pub conflict: crate::core::fleet::Claim,
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
            conflict: crate::fleet::NO_CLAIM,
        }
    }
}

impl Shared {
    /// The other server's claim while the generator refuses because of it.
    pub fn conflict(&self) -> Option<crate::core::fleet::Claim> {
        self.state.refused.then_some(self.conflict)
    }
}

// SAFETY: plain old data; the one address in it points into shared memory itself.
unsafe impl PGRXSharedMemory for Shared {}

pub static GENERATOR: PgLwLock<Shared> = unsafe { PgLwLock::new(c"snowflake_generator") };

/// Requests the segment and the LWLock; only valid while shared_preload_libraries is processed.
pub fn init() {
    pg_shmem_init!(GENERATOR);
}

/// This backend's direct pointers to the generator and its LWLock, for the hot path. Null until
/// the first call has checked that the library is preloaded and the server is not in recovery
/// (a backend never goes back into recovery, so the check need not be repeated).
#[derive(Clone, Copy)]
struct Hot {
    shared: *mut Shared,
    lock: *mut pg_sys::LWLock,
}

static mut HOT: Hot = Hot {
    shared: std::ptr::null_mut(),
    lock: std::ptr::null_mut(),
};

/// The two LWLock calls without pgrx's sigsetjmp guard around them (see `snowflake_nextval`).
mod unguarded {
    use pgrx::pg_sys::{LWLock, LWLockMode};
    unsafe extern "C-unwind" {
        pub fn LWLockAcquire(lock: *mut LWLock, mode: LWLockMode::Type) -> bool;
        pub fn LWLockRelease(lock: *mut LWLock);
    }
}

pub fn enable_hot_path() {
    // SAFETY: backends are single-threaded; the pointers stay valid for the process's life.
    unsafe {
        if HOT.shared.is_null() {
            let lock = &raw mut (*pg_sys::GetNamedLWLockTranche(GENERATOR.name().as_ptr())).lock;
            let shared: *mut Shared = &mut *GENERATOR.exclusive();
            HOT = Hot { shared, lock };
        }
    }
}

/// One attempt on the common path, or None before `enable_hot_path`.
///
/// # Safety
/// Only from a backend's main thread.
#[inline(always)]
pub unsafe fn hot_attempt(
) -> Option<Result<crate::core::generator::Step, crate::core::generator::GenError>> {
    unsafe {
        let hot = (&raw const HOT).read();
        if hot.shared.is_null() {
            return None;
        }
        let now = crate::core::time::Clock::now_unix_ms(&crate::core::time::SystemClock)
            - crate::config::epoch_ms();
        let node = crate::config::node();
        let drift = crate::config::max_clock_drift_ms();
        unguarded::LWLockAcquire(hot.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let step = (*hot.shared).state.next(now, node, drift);
        unguarded::LWLockRelease(hot.lock);
        Some(step)
    }
}

/// Wakes the lease worker, if one runs. Called with no lock held.
pub fn wake_worker() {
    let latch = GENERATOR.share().worker_latch;
    if latch != 0 {
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}
