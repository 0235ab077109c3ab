//! Plan time of the dynamic programme, p50/p99, at the three sizes.
//! `cargo bench -p unicron-tests --bench plan_time` prints one table. It
//! lives outside `unicron-core` because it reads the wall clock.

use std::time::{Duration, Instant};

use unicron_core::allocation::{JobDemand, Problem, Profile};

/// Jobs with Megatron-like profiles (a few percent lost per doubling),
/// seeded so every run plans the same problems.
fn problem(gpus: u32, jobs: usize, seed: u64) -> Problem {
    let mut rng = seed;
    let mut next = move |n: u64| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) % n
    };
    let unit = 8;
    let share = (gpus / jobs as u32).max(unit);
    let jobs = (0..jobs)
        .map(|i| {
            let min = unit * (1 + next(4) as u32);
            let max = (share * (1 + next(3) as u32)).max(min);
            let per_gpu = 130e12 + next(30) as f64 * 1e12;
            let mut points = Vec::new();
            let mut x = min;
            let mut efficiency = 1.0;
            while x <= max {
                points.push((x, per_gpu * x as f64 * efficiency));
                efficiency *= 0.97;
                x *= 2;
            }
            if points.last().map(|p| p.0) != Some(max) {
                points.push((max, per_gpu * max as f64 * efficiency));
            }
            JobDemand {
                id: format!("job-{i:03}"),
                weight: 1.0 + next(3) as f64,
                min_gpus: min,
                max_gpus: max,
                unit_gpus: unit,
                current_gpus: (share / unit) * unit,
                hit: i == 0,
                transition_s: 600.0,
                profile: Profile::new(points, "t").unwrap(),
            }
        })
        .collect();
    Problem {
        gpus,
        unit,
        running_s: 86_400.0,
        jobs,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    // `cargo test` runs benches with --bench absent; keep that fast.
    let quick = !std::env::args().any(|a| a == "--bench");
    println!("| GPUs | jobs | unit | runs | p50 | p99 | target |");
    println!("|---:|---:|---:|---:|---:|---:|---|");
    for (gpus, jobs, runs, target) in [
        (128, 8, 2000, "< 1 ms"),
        (1024, 32, 200, "< 20 ms"),
        (10240, 100, 20, "< 500 ms"),
    ] {
        let runs = if quick { 2 } else { runs };
        let mut times: Vec<Duration> = (0..runs)
            .map(|seed| {
                let p = problem(gpus, jobs, seed as u64);
                let started = Instant::now();
                let best = std::hint::black_box(p.solve());
                let elapsed = started.elapsed();
                assert!(best.gpus.iter().sum::<u32>() <= gpus);
                elapsed
            })
            .collect();
        times.sort();
        println!(
            "| {gpus} | {jobs} | 8 | {runs} | {:.3} ms | {:.3} ms | {target} |",
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3,
        );
    }
}
