//! `unicron evaluate`'s largest scenario: a week of a 10,240-GPU cluster
//! (1,280 nodes, 64 jobs), every policy on one seed, on every core, as the
//! command runs it. `cargo bench -p unicron-tests --bench evaluation`
//! prints one table: the trace's failures, each policy's WAF and the
//! seconds the whole evaluation took.

use std::time::Instant;

use unicron_simulator::evaluate::{evaluate, scenarios};

fn main() {
    let scenario = scenarios()
        .into_iter()
        .find(|s| s.name == "gpus-10240")
        .expect("a named scenario");
    let started = Instant::now();
    let e = evaluate(&scenario, 1, |_, _| {});
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "| scenario | simulated | failures in the trace | policies run | seconds | policy WAFs |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    let wafs: Vec<String> = e
        .policies
        .iter()
        .map(|(name, r)| format!("{name} {:.1}%", r.waf_fraction * 100.0))
        .collect();
    println!(
        "| {} | {} h | {} | {} | {elapsed:.1} | {} |",
        scenario.name,
        scenario.hours,
        e.trace_lengths[0],
        e.policies.len(),
        wafs.join(", ")
    );
}
