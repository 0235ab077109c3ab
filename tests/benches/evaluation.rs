//! `unicron evaluate`'s largest scenarios, every policy on one seed, on
//! every core, as the command runs them: a week of a 10,240-GPU cluster
//! (1,280 nodes, 64 jobs), and the whole real fault trace (349 days) on its
//! own 400 servers and tiled over 1,280. `cargo bench -p unicron-tests
//! --bench evaluation` prints one table: the trace's failures, each
//! policy's WAF and the seconds each evaluation took.

use std::time::Instant;

use unicron_simulator::evaluate::{evaluate, scenarios};

fn main() {
    println!(
        "| scenario | simulated | failures in the trace | policies run | seconds | policy WAFs |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    for name in ["gpus-10240", "real-infinitehbd", "real-infinitehbd-10240"] {
        let scenario = scenarios()
            .into_iter()
            .find(|s| s.name == name)
            .expect("a named scenario");
        let started = Instant::now();
        let e = evaluate(&scenario, 1, |_, _| {});
        let elapsed = started.elapsed().as_secs_f64();
        let wafs: Vec<String> = e
            .policies
            .iter()
            .map(|(name, r)| format!("{name} {:.1}%", r.waf_fraction * 100.0))
            .collect();
        println!(
            "| {} | {:.0} h | {} | {} | {elapsed:.1} | {} |",
            scenario.name,
            scenario.hours,
            e.trace_lengths[0],
            e.policies.len(),
            wafs.join(", ")
        );
    }
}
