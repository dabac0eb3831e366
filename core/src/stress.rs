//! Many threads sharing one generator behind a process-local mutex, as backends share one behind
//! the LWLock: no ID may repeat, and each thread sees its own IDs strictly increase.

use super::generator::{issue, State, Step};
use super::layout::{Node, TWITTER_EPOCH_MS};
use super::time::{Clock, SystemClock};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};

/// A clock that moves forward slowly and sometimes back, shared by all threads.
struct JitteryClock(AtomicI64);

impl Clock for JitteryClock {
    fn now_unix_ms(&self) -> i64 {
        let t = self.0.fetch_add(1, Ordering::Relaxed);
        // Every 64th reading goes back 3 ms; on average the clock moves forward.
        TWITTER_EPOCH_MS + 1_000_000 + t / 8 - if t % 64 == 0 { 3 } else { 0 }
    }
}

fn hammer(clock: &(impl Clock + Sync), threads: usize, per_thread: usize, drift: u64) {
    let state = Mutex::new(State::new());
    let node = Node::new(1, 2).unwrap();
    let all: Vec<Vec<i64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    (0..per_thread)
                        .map(|_| {
                            issue(
                                || {
                                    state.lock().next(
                                        clock.now_unix_ms() - TWITTER_EPOCH_MS,
                                        node,
                                        drift,
                                    )
                                },
                                |step| {
                                    assert!(!matches!(step, Step::WaitLease { .. }));
                                    std::thread::yield_now();
                                    Ok::<(), ()>(())
                                },
                            )
                            .expect("no error within the drift")
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut seen = HashSet::new();
    for ids in &all {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread saw IDs go down"
        );
        for id in ids {
            assert!(seen.insert(*id), "duplicate ID {id}");
        }
    }
    assert_eq!(seen.len(), threads * per_thread);
}

#[test]
fn threads_sharing_one_generator_never_repeat_with_the_system_clock() {
    hammer(&SystemClock, 8, 50_000, 10);
}

#[test]
fn threads_sharing_one_generator_never_repeat_with_a_jittery_clock() {
    hammer(&JitteryClock(AtomicI64::new(0)), 8, 50_000, 5);
}

#[test]
fn threads_waiting_for_the_clock_still_never_repeat() {
    // No drift allowed: an exhausted millisecond makes threads wait for the next one.
    hammer(&SystemClock, 4, 30_000, 0);
}
