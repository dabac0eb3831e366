//! `make sim`: runs schedules from random seeds for `SIM_SECONDS` (default 60), or replays one
//! (`SEED=n`). An invariant broken exits 1 with the seed and the shrunk trace.

use snowflake_sim::{run, run_traced, schedule, shrink};
use std::time::{Duration, Instant};

fn main() {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let seconds: u64 = var("SIM_SECONDS").map_or(60, |s| s.parse().expect("SIM_SECONDS: a number"));
    let seeds: Option<u64> =
        var("SIM_SCHEDULES").map(|s| s.parse().expect("SIM_SCHEDULES: a number"));
    if let Some(seed) = var("SEED") {
        let seed: u64 = seed.parse().expect("SEED: a number");
        std::process::exit(if check(seed, true) { 0 } else { 1 });
    }
    let first = var("SIM_FIRST_SEED").map_or_else(random_seed, |s| {
        s.parse().expect("SIM_FIRST_SEED: a number")
    });
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let (mut schedules, mut steps, mut ids) = (0u64, 0u64, 0u64);
    let mut seed = first;
    println!(
        "snowflake-sim: schedules from seed {first} on, for {} ",
        seeds.map_or(format!("{seconds} s"), |n| format!("{n} schedules"))
    );
    loop {
        if seeds.map_or(Instant::now() >= deadline, |n| schedules >= n) {
            break;
        }
        let (knobs, events) = schedule(seed);
        let (result, s, i) = run(knobs, &events);
        schedules += 1;
        steps += s;
        ids += i;
        if result.is_err() {
            check(seed, false);
            std::process::exit(1);
        }
        seed = seed.wrapping_add(1);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "snowflake-sim: {schedules} schedules (seeds {first}..{}), {steps} events, {ids} IDs in {secs:.1} s: {:.0} events/s, {:.0} schedules/min; no invariant broken",
        seed.wrapping_sub(1),
        steps as f64 / secs,
        schedules as f64 * 60.0 / secs
    );
}

/// Runs one seed; on a violation prints it with its shrunk trace. Returns whether it held.
fn check(seed: u64, verbose: bool) -> bool {
    let (knobs, events) = schedule(seed);
    let (result, steps, ids) = run(knobs, &events);
    match result {
        Ok(()) => {
            if verbose {
                println!(
                    "seed {seed}: {} servers, {steps} events, {ids} IDs: no invariant broken",
                    knobs.servers
                );
            }
            true
        }
        Err((at, v)) => {
            println!(
                "seed {seed}: {v} (event {at} of {}; knobs {knobs:?})",
                events.len()
            );
            let short = shrink(knobs, &events, v.kind());
            let again = run(knobs, &short).0;
            println!(
                "shrunk to {} events (replay: make sim SEED={seed}); it ends: {}",
                short.len(),
                again
                    .err()
                    .map_or("(held after all)".into(), |(_, v)| v.to_string())
            );
            if std::env::var("SIM_TRACE").is_ok_and(|v| v == "1") {
                let _ = run_traced(knobs, &short, true);
            } else {
                for (n, ev) in short.iter().enumerate() {
                    println!("  {n:4}  {ev:?}");
                }
                println!("(SIM_TRACE=1 prints the world after each event)");
            }
            false
        }
    }
}

fn random_seed() -> u64 {
    let mut buf = [0u8; 8];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom");
    u64::from_ne_bytes(buf) >> 16
}
