//! Running the policies: one run of one policy on one seed, and every
//! policy over the seeds with the means and ratios the tables report.

use std::collections::BTreeMap;

use serde::Serialize;
use unicron_core::FailureKind;
use unicron_core::detector::DetectorConfig;
use unicron_core::planner::PlannerConfig;

use super::{PolicyModel, Scenario, policies};
use crate::config::SimConfig;
use crate::faults::{self, TraceEntry};
use crate::model::Sim;
use crate::offline::{DetectionDelay, Offline};

/// One policy, one seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub seed: u64,
    pub waf_fraction: f64,
    pub downtime_s: f64,
    /// Failures that hit a running job.
    pub failures: u64,
    /// Trace entries the run reached; those that hit no running job are
    /// no-ops, so policies differ in `failures` only.
    pub offered: u64,
    pub commands: u64,
    /// (hours, accumulated WAF fraction so far), once a simulated hour.
    pub timeline: Vec<(f64, f64)>,
    /// Per failure kind (a real trace's category): (failures that hit,
    /// total downtime in seconds from the injection until the job ran
    /// again).
    pub downtime_by_kind: BTreeMap<String, (u64, f64)>,
    /// The trace entries the run reached, as CSV: the same bytes under
    /// every policy.
    #[serde(skip)]
    pub offered_csv: String,
}

/// The simulated cluster `policy` runs on in `scenario` with `seed`, fed
/// `trace`, with every record (see [`Sim::with_sparse_feed`]).
pub fn sim_for(scenario: &Scenario, policy: &PolicyModel, seed: u64, trace: &[TraceEntry]) -> Sim {
    let mut config = SimConfig {
        transitions: policy.transitions.clone(),
        throughput_factor: policy.throughput_factor,
        restart_rolls_back: policy.restart_rolls_back,
        reconfigure_rolls_back: policy.reconfigure_rolls_back,
        ..scenario.sim_config(seed)
    };
    if let Some(interval) = policy.checkpoint_interval_s {
        config.checkpoint_interval_s = interval;
    }
    Sim::new(config, Some(trace.to_vec()))
}

/// The offline loop of `policy` around `sim`: its planner, and what it
/// learns late or never.
pub fn offline_for(policy: &PolicyModel, sim: Sim) -> Offline {
    let planner = PlannerConfig {
        policy: policy.planner,
        // Alternatives explain a decision to an auditor and change none;
        // each costs a solve of the whole cluster, which a comparison of
        // policies does not need (nor the digest, see `run`'s loop).
        alternatives: 1,
        ..PlannerConfig::default()
    };
    let timeout_ms = sim.config().collective_timeout_ms();
    let mut offline = Offline::new(sim, DetectorConfig::default(), planner).without_digests();
    if !policy.late.is_empty() || policy.blind_to_hangs {
        offline = offline.with_detection_delay(DetectionDelay {
            kinds: policy.late.clone(),
            delay_ms: timeout_ms,
            // No hang statistics and no reading of NCCL's lines: what they
            // learn of a stall is the watchdog's abort at the timeout.
            ignored: if policy.blind_to_hangs {
                vec![FailureKind::TaskHang, FailureKind::NcclTimeout]
            } else {
                Vec::new()
            },
        });
    }
    offline
}

/// Runs `policy` on `scenario` with `seed`, fed `trace` (the seed's,
/// [`Scenario::trace`]), on the sparse feed.
pub fn run(scenario: &Scenario, policy: &PolicyModel, seed: u64, trace: &[TraceEntry]) -> Run {
    let sim = sim_for(scenario, policy, seed, trace).with_sparse_feed();
    let mut offline = offline_for(policy, sim);
    let mut timeline = Vec::new();
    let steps = scenario.hours.ceil() as u64;
    let mut summary = None;
    for hour in 1..=steps {
        let s = offline.run_for((hour as f64).min(scenario.hours) * 3_600.0);
        timeline.push(((hour as f64).min(scenario.hours), s.waf_fraction));
        summary = Some(s);
    }
    let summary = summary.expect("at least one hour");
    let truth = offline.sim.truth();
    let end = offline.sim.now_ms();
    let mut downtime_by_kind: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for fault in &truth.faults {
        let until = fault.running_again_ms.unwrap_or(end);
        // A real trace's faults by its own categories.
        let name = fault.category.as_deref().unwrap_or(fault.kind.symbol());
        let entry = downtime_by_kind.entry(name.to_string()).or_default();
        entry.0 += 1;
        entry.1 += (until - fault.injected_ms) as f64 / 1000.0;
    }
    Run {
        seed,
        waf_fraction: summary.waf_fraction,
        downtime_s: summary.downtime_s.values().sum(),
        failures: summary.failures_injected,
        offered: truth.offered.len() as u64,
        commands: summary.commands_executed,
        timeline,
        downtime_by_kind,
        offered_csv: faults::write_trace(&truth.offered),
    }
}

/// Mean and spread of one policy over the seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyResult {
    pub waf_fraction: f64,
    pub waf_fraction_std: f64,
    pub downtime_h: f64,
    /// This policy's WAF over each other policy's: the ratio of the means.
    pub ratio: BTreeMap<String, f64>,
    /// The same per seed (each seed's failures are the same for both),
    /// as (min, max) over the seeds.
    pub ratio_range: BTreeMap<String, (f64, f64)>,
    pub runs: Vec<Run>,
}

/// Everything `unicron evaluate` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub scenario: Scenario,
    pub seeds: u64,
    /// Failures in each seed's trace.
    pub trace_lengths: Vec<usize>,
    pub policies: BTreeMap<String, PolicyResult>,
    /// Policies not run, with why.
    pub not_run: BTreeMap<String, String>,
}

pub(super) fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn std_dev(values: &[f64]) -> f64 {
    let m = mean(values);
    (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / values.len().max(1) as f64).sqrt()
}

/// Runs every policy on seeds 1..=`seeds`, each seed's trace drawn once and
/// fed to every policy, the runs spread over the machine's cores (each run
/// is a function of its inputs, so the order they finish in changes
/// nothing). `progress` hears of each run as it starts.
pub fn evaluate(
    scenario: &Scenario,
    seeds: u64,
    progress: impl Fn(&str, u64) + Sync,
) -> Evaluation {
    let list: Vec<PolicyModel> = policies(scenario);
    let traces: BTreeMap<u64, Vec<TraceEntry>> = (1..=seeds)
        .map(|seed| (seed, scenario.trace(seed)))
        .collect();
    let runnable: Vec<usize> = (0..list.len())
        .filter(|p| list[*p].cannot_run.is_none())
        .collect();
    let work: Vec<(usize, u64)> = runnable
        .iter()
        .flat_map(|p| (1..=seeds).map(move |seed| (*p, seed)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(BTreeMap::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers.min(work.len()) {
            scope.spawn(|| {
                while let Some(&(p, seed)) =
                    work.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    progress(list[p].name, seed);
                    let result = run(scenario, &list[p], seed, &traces[&seed]);
                    done.lock()
                        .expect("no worker panics holding it")
                        .insert((p, seed), result);
                }
            });
        }
    });
    let mut done = done.into_inner().expect("workers joined");
    let mut policies = BTreeMap::new();
    for &p in &runnable {
        let runs: Vec<Run> = (1..=seeds)
            .map(|seed| done.remove(&(p, seed)).expect("every run finished"))
            .collect();
        let waf: Vec<f64> = runs.iter().map(|r| r.waf_fraction).collect();
        let downtime: Vec<f64> = runs.iter().map(|r| r.downtime_s / 3_600.0).collect();
        policies.insert(
            list[p].name.to_string(),
            PolicyResult {
                waf_fraction: mean(&waf),
                waf_fraction_std: std_dev(&waf),
                downtime_h: mean(&downtime),
                ratio: BTreeMap::new(),
                ratio_range: BTreeMap::new(),
                runs,
            },
        );
    }
    let snapshot = policies.clone();
    for (name, result) in &mut policies {
        for (other, theirs) in snapshot.iter().filter(|(other, _)| *other != name) {
            let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
            result.ratio.insert(
                other.clone(),
                ratio(result.waf_fraction, theirs.waf_fraction),
            );
            let per_seed: Vec<f64> = result
                .runs
                .iter()
                .zip(&theirs.runs)
                .map(|(a, b)| ratio(a.waf_fraction, b.waf_fraction))
                .collect();
            let range = per_seed
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
                    (lo.min(*r), hi.max(*r))
                });
            result.ratio_range.insert(other.clone(), range);
        }
    }
    Evaluation {
        scenario: scenario.clone(),
        seeds,
        trace_lengths: traces.values().map(Vec::len).collect(),
        policies,
        not_run: list
            .iter()
            .filter_map(|p| {
                p.cannot_run
                    .map(|why| (p.name.to_string(), why.to_string()))
            })
            .collect(),
    }
}
