//! The scenarios: a cluster, its jobs, its failure rate, its collective
//! timeout and how long to run, and the sweeps around the paper setting.

use serde::Serialize;

use crate::config::{NcclTimeoutShows, SimConfig, Workload};
use crate::faults::{self, TraceEntry};

/// A cluster, its jobs, its failure rate, its collective timeout and how
/// long to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    pub nodes: u32,
    pub jobs: u32,
    pub hours: f64,
    /// Mean time between failures of the whole cluster, seconds.
    pub mtbf_s: f64,
    /// The failure rate as a multiple of the paper setting's.
    pub rate: f64,
    pub workload: Workload,
    /// The jobs' collective timeout (NCCL's watchdog), seconds.
    pub collective_timeout_s: f64,
    /// How long an isolated node is away for repair, seconds.
    pub repair_s: f64,
    /// unicron's measured transition costs times this.
    pub unicron_cost_factor: f64,
}

fn scenario(name: &str, nodes: u32, jobs: u32, hours: f64, rate: f64) -> Scenario {
    let gpus = f64::from(nodes * 8);
    Scenario {
        name: name.to_string(),
        nodes,
        jobs,
        hours,
        mtbf_s: crate::config::GPU_HOURS_PER_FAILURE / gpus * 3_600.0 / rate,
        rate,
        workload: Workload::Uniform,
        // PyTorch's and Megatron-LM's default (`--distributed-timeout-minutes`).
        collective_timeout_s: 600.0,
        repair_s: SimConfig::default().repair_s,
        unicron_cost_factor: 1.0,
    }
}

/// Every named scenario: the paper setting, scale, and the sensitivity
/// sweeps (failure rate, collective timeout, repair time, unicron's costs).
pub fn scenarios() -> Vec<Scenario> {
    let paper = || scenario("paper", 16, 4, 7.0 * 24.0, 1.0);
    let rate = |r: f64| scenario(&format!("rate-{r}x"), 16, 4, 7.0 * 24.0, r);
    vec![
        paper(),
        Scenario {
            name: "timeout-30m".into(),
            collective_timeout_s: 1_800.0,
            ..paper()
        },
        scenario("gpus-1024", 128, 16, 24.0, 1.0),
        scenario("gpus-10240", 1_280, 64, 7.0 * 24.0, 1.0),
        rate(0.25),
        rate(0.5),
        rate(2.0),
        rate(4.0),
        Scenario {
            name: "repair-30m".into(),
            repair_s: 1_800.0,
            ..paper()
        },
        Scenario {
            name: "repair-8h".into(),
            repair_s: 8.0 * 3_600.0,
            ..paper()
        },
        Scenario {
            name: "costs-0.5x".into(),
            unicron_cost_factor: 0.5,
            ..paper()
        },
        Scenario {
            name: "costs-2x".into(),
            unicron_cost_factor: 2.0,
            ..paper()
        },
        scenario("smoke", 8, 2, 6.0, 2.0),
        // Jobs that differ: where a node goes after a failure matters.
        Scenario {
            workload: Workload::Heterogeneous,
            ..scenario("heterogeneous", 128, 8, 7.0 * 24.0, 1.0)
        },
    ]
}

impl Scenario {
    /// The simulated cluster of this scenario with `seed`, before a policy
    /// shapes it.
    pub fn sim_config(&self, seed: u64) -> SimConfig {
        SimConfig {
            nodes: self.nodes,
            jobs: self.jobs,
            workload: self.workload,
            seed,
            mtbf_s: Some(self.mtbf_s),
            repair_s: self.repair_s,
            collective_timeout_s: self.collective_timeout_s,
            nccl_timeout: NcclTimeoutShows::Stall,
            // The sparse feed emits neither; set as the records-mode
            // comparison in `offline` sets them.
            telemetry_interval_s: 300.0,
            noise_interval_s: 3_600.0,
            ..SimConfig::default()
        }
    }

    /// The failure trace of `seed`: drawn once over every node, the same
    /// for every policy.
    pub fn trace(&self, seed: u64) -> Vec<TraceEntry> {
        let config = self.sim_config(seed);
        faults::draw_trace(
            &config.node_names(),
            self.mtbf_s,
            self.hours * 3_600.0,
            seed,
        )
    }
}

/// The scenarios `unicron evaluate --scenario rates` runs: the paper
/// setting at every failure rate, lowest first.
pub const RATE_SWEEP: [&str; 5] = ["rate-0.25x", "rate-0.5x", "paper", "rate-2x", "rate-4x"];
