//! The scenarios: a cluster, its jobs, its failure rate, its collective
//! timeout and how long to run, and the sweeps around the paper setting.

use serde::Serialize;

use crate::config::{NcclTimeoutShows, SimConfig, Workload};
use crate::faults::{self, TraceEntry};
use crate::real_trace::{Fit, Reading, RealTrace};

/// Where a scenario's failures come from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failures {
    /// Poisson arrivals at the scenario's rate, kinds from the taxonomy's
    /// mix ([`faults::draw_trace`]).
    Drawn,
    /// StepFun's InfiniteHBD trace, tiled over the cluster's nodes, read
    /// so ([`crate::real_trace`]).
    InfiniteHbd(Reading),
}

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
    pub failures: Failures,
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
        failures: Failures::Drawn,
    }
}

/// A scenario on StepFun's InfiniteHBD trace: the whole trace (349 days)
/// on `nodes` nodes, read so. Its rate is the trace's own: 584 node faults
/// in 349 days on 400 servers, one per 861 min, about 1/180 of the paper
/// setting's rate (which counts every failure of a job, not only the
/// faults that took a server out for repair).
fn real(name: &str, nodes: u32, jobs: u32, workload: Workload, reading: Reading) -> Scenario {
    let trace = RealTrace::infinitehbd();
    let hours = trace.span_s / 3_600.0;
    let paper = scenario(name, nodes, jobs, hours, 1.0);
    let failures_per_s = trace.faults.len() as f64 / trace.span_s / trace.servers as f64;
    let mtbf_s = 1.0 / (failures_per_s * f64::from(nodes));
    Scenario {
        rate: paper.mtbf_s / mtbf_s,
        mtbf_s,
        workload,
        failures: Failures::InfiniteHbd(reading),
        ..paper
    }
}

const EVERY: Reading = Reading::EveryFaultHitsAJob;
const CHECKS: Reading = Reading::ChecksFindTheirOwn;

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
        // Failures that really happened (docs/EVALUATION.md, "A real
        // fault trace"): the trace's own 400 servers, two job mixes and
        // two readings of the faults a site's checks find, and tiled.
        real("real-infinitehbd", 400, 16, Workload::Uniform, EVERY),
        real(
            "real-infinitehbd-checks",
            400,
            16,
            Workload::Uniform,
            CHECKS,
        ),
        real(
            "real-infinitehbd-heterogeneous",
            400,
            16,
            Workload::Heterogeneous,
            EVERY,
        ),
        real(
            "real-infinitehbd-10240",
            1_280,
            64,
            Workload::Uniform,
            EVERY,
        ),
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

    /// The failure trace of `seed`, the same for every policy: drawn once
    /// over every node, or the real trace with its servers drawn onto the
    /// nodes.
    pub fn trace(&self, seed: u64) -> Vec<TraceEntry> {
        let nodes = self.sim_config(seed).node_names();
        match self.failures {
            Failures::Drawn => faults::draw_trace(&nodes, self.mtbf_s, self.hours * 3_600.0, seed),
            Failures::InfiniteHbd(reading) => {
                RealTrace::infinitehbd().entries(&nodes, seed, reading, Fit::Tile)
            }
        }
    }
}

/// The scenarios `unicron evaluate --scenario rates` runs: the paper
/// setting at every failure rate, lowest first.
pub const RATE_SWEEP: [&str; 5] = ["rate-0.25x", "rate-0.5x", "paper", "rate-2x", "rate-4x"];

/// The scenarios `unicron evaluate --scenario real` runs: the paper
/// setting, then the real trace's.
pub const REAL_SWEEP: [&str; 5] = [
    "paper",
    "real-infinitehbd",
    "real-infinitehbd-checks",
    "real-infinitehbd-heterogeneous",
    "real-infinitehbd-10240",
];
