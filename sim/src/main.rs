//! `make sim`: runs schedules from random seeds for `SIM_SECONDS` (default 60), or replays one
//! (`SEED=n`), or every seed of a regressions file (`SIM_REGRESSIONS=sim/regressions.txt`). An invariant broken exits 1 with the seed and the shrunk trace.

use snowflake_sim::{run, run_traced, schedule, shrink};
use std::time::{Duration, Instant};

fn main() {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let seconds: u64 = var("SIM_SECONDS").map_or(60, |s| s.parse().expect("SIM_SECONDS: a number"));
    let seeds: Option<u64> =
        var("SIM_SCHEDULES").map(|s| s.parse().expect("SIM_SCHEDULES: a number"));
    if let Some(file) = var("SIM_REGRESSIONS") {
        std::process::exit(if regressions(&file) { 0 } else { 1 });
    }
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
    // SIM_KEEP_GOING=1: a broken seed is listed and the run goes on (to collect every seed of a
    // long run for sim/regressions.txt); otherwise the first one stops it, shrunk.
    let keep_going = var("SIM_KEEP_GOING").is_some_and(|v| v == "1");
    let mut broken: Vec<(u64, String)> = Vec::new();
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
        if let Err((at, v)) = result {
            if !keep_going {
                check(seed, false);
                std::process::exit(1);
            }
            println!("seed {seed}: {v} (event {at} of {})", events.len());
            broken.push((seed, v.to_string()));
        }
        seed = seed.wrapping_add(1);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "snowflake-sim: {schedules} schedules (seeds {first}..{}), {steps} events, {ids} IDs in {secs:.1} s: {:.0} events/s, {:.0} schedules/min; {}",
        seed.wrapping_sub(1),
        steps as f64 / secs,
        schedules as f64 * 60.0 / secs,
        if broken.is_empty() {
            "no invariant broken".to_string()
        } else {
            format!("{} seeds broke an invariant", broken.len())
        }
    );
    if !broken.is_empty() {
        println!("for sim/regressions.txt (replay each with make sim SEED=n):");
        for (seed, v) in &broken {
            println!("{seed:<17} open   {v}");
        }
        std::process::exit(1);
    }
}

/// Replays every seed of a regressions file (its header says the format): a `fixed` seed must
/// hold, an `open` one must still break an invariant. Returns whether every seed did as listed.
fn regressions(file: &str) -> bool {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let (mut fixed, mut open, mut wrong) = (0, 0, Vec::new());
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(seed), Some(state)) = (words.next(), words.next()) else {
            panic!("{file}:{}: want `seed state note`", n + 1);
        };
        let seed: u64 = seed
            .parse()
            .unwrap_or_else(|_| panic!("{file}:{}: {seed} is not a seed", n + 1));
        let (knobs, events) = schedule(seed);
        let held = run(knobs, &events).0.is_ok();
        match (state, held) {
            ("fixed", true) => fixed += 1,
            ("open", false) => open += 1,
            ("fixed", false) => {
                check(seed, false);
                wrong.push(format!("seed {seed} ({file}:{}) is fixed, and breaks an invariant again", n + 1));
            }
            ("open", true) => wrong.push(format!(
                "seed {seed} ({file}:{}) is open, and now holds: if a change fixed it, mark it fixed",
                n + 1
            )),
            _ => panic!("{file}:{}: state {state} is neither fixed nor open", n + 1),
        }
    }
    println!(
        "snowflake-sim: regression seeds of {file}: {fixed} fixed held, {open} open still break"
    );
    for w in &wrong {
        println!("snowflake-sim: {w}");
    }
    wrong.is_empty()
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
