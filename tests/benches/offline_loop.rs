//! The offline loop (simulator → core detector → planner → gate →
//! simulator, in one thread, no broker): simulated seconds and records per
//! real second at 128 and 1,024 GPUs. `cargo bench -p unicron-tests --bench
//! offline_loop` prints one table; the evaluation runs weeks of simulated
//! time this way.

use std::time::Instant;

use unicron_core::detector::DetectorConfig;
use unicron_core::planner::PlannerConfig;
use unicron_simulator::offline::Offline;
use unicron_simulator::{Sim, SimConfig};

fn main() {
    println!(
        "| GPUs | jobs | simulated hours | failures | seconds | simulated s per s | records/s | WAF of ideal |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (nodes, jobs, hours) in [(16, 3, 24.0), (128, 8, 2.0)] {
        let config = SimConfig {
            nodes,
            jobs,
            seed: 1,
            mtbf_s: Some(3_600.0 * 16.0 / f64::from(nodes)),
            ..SimConfig::default()
        };
        let mut run = Offline::new(
            Sim::new(config, None),
            DetectorConfig::default(),
            PlannerConfig::default(),
        );
        let started = Instant::now();
        let summary = run.run_for(hours * 3_600.0);
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "| {} | {} | {:.0} | {} | {:.2} | {:.0} | {:.0} | {:.1}% |",
            nodes * 8,
            jobs,
            hours,
            summary.failures_injected,
            elapsed,
            hours * 3_600.0 / elapsed,
            run.flow.records as f64 / elapsed,
            summary.waf_fraction * 100.0
        );
    }
}
