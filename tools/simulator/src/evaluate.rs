//! The evaluation: recovery policies compared under the same failures, in
//! the offline loop (the core detector and planner the services run).
//!
//! A policy here is more than the planner's policy: it is also how soon the
//! system learns of a failure and how long its recovery mechanisms take.
//! Every number is documented with its source in `docs/EVALUATION.md`;
//! those without one are marked as assumptions there and below.

use std::collections::BTreeMap;

use serde::Serialize;
use unicron_core::FailureKind;
use unicron_core::detector::DetectorConfig;
use unicron_core::planner::{PlannerConfig, PolicyName};

use crate::config::{NcclTimeoutShows, SimConfig, Transitions, Workload};
use crate::faults::{self, TraceEntry};
use crate::model::Sim;
use crate::offline::{DetectionDelay, Offline};

/// One recovery system as the evaluation models it.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyModel {
    pub name: &'static str,
    pub planner: PolicyName,
    /// Failures of these kinds the system's code does not watch for: found
    /// when the collective timeout ends the job, not by unicron's detector.
    pub late: Vec<FailureKind>,
    /// No hang detection of its own: a hang is found only by what the
    /// collective timeout makes of it (the watchdog's line, the abort).
    pub blind_to_hangs: bool,
    pub transitions: Transitions,
    pub throughput_factor: f64,
    /// Its own checkpoint interval, if it differs from the cluster's.
    pub checkpoint_interval_s: Option<i64>,
    pub restart_rolls_back: bool,
    pub reconfigure_rolls_back: bool,
    /// Why it cannot run the scenario's models at all (with the source).
    pub cannot_run: Option<&'static str>,
}

/// Kinds that show as errors in logs while every process lives on: the
/// baselines have nothing that reads them, so the job stalls until the
/// collective timeout aborts it. An ASSUMPTION that favours none: NCCL
/// surfaces some of these as errors sooner.
const UNWATCHED_LINES: [FailureKind; 4] = [
    FailureKind::NetworkError,
    FailureKind::LinkFlapping,
    FailureKind::ConnectionRefused,
    FailureKind::ConnectionReset,
];

/// The agent's restart of a job's workers from its in-memory snapshot:
/// injection or detection to the first training step after the restore,
/// the slowest of the real-PyTorch faults (docs/BENCHMARKS.md, "Real
/// PyTorch": 2.12 s for a killed worker). State moved: 0.4 MB a node.
pub const MEASURED_RESTART_S: f64 = 2.12;
/// The same after a node loss, the state fetched from the peer's replica
/// (docs/BENCHMARKS.md: first step 1.75 s after the detection).
pub const MEASURED_RECONFIGURE_S: f64 = 1.75;
/// The agent's snapshot path for one rank's state, measured with 1 GB
/// (docs/BENCHMARKS.md, "In-memory snapshots": 4.99 s to the peer, bounded
/// by serialisation and two SHA-256 passes on this 2-core machine).
pub const MEASURED_STATE_MB_S: f64 = 211.0;
/// Training state per parameter: fp16 weights and gradients and fp32
/// master weights, momentum and variance (the ZeRO paper's 16 bytes).
pub const STATE_BYTES_PER_PARAMETER: f64 = 16.0;

/// Oobleck, GPT-3 6.7B: a lost node costs a 10 s re-instantiation of its
/// pipelines (Oobleck's SOSP '23 artifact, branch `sosp23-artifact`,
/// `tools/simulator/oobleck_simulator.py` L307
/// `local_rendezvous_timeout_delta = 10_000`, global 0 at L207).
pub const OOBLECK_RECONFIGURE_S: f64 = 10.0;
/// Varuna, GPT-3 6.7B: every lost node is a fatal failure and a restart of
/// 581 s plus a 120 s checkpoint (same artifact, `varuna_simulator.py` L347
/// `local_rendezvous_timeout_delta = 701_000` less L348
/// `checkpointing_overhead = 120_000` at L1071, the checkpoint at L1465).
pub const VARUNA_RESTART_S: f64 = 701.0;
/// Varuna checkpoints every 10 iterations (`varuna_simulator.py` L118
/// `checkpoint_per_iter=10`), 120 s each (L348).
pub const VARUNA_CHECKPOINT_S: f64 = 120.0;
/// GPT-3 6.7B iteration time in the artifact at 30 nodes: Varuna 5.2406
/// samples/s (L844-859), batch 1024: 195.4 s.
pub const VARUNA_ITERATION_S: f64 = 1024.0 / 5.2406;
/// Varuna's failure-free throughput against Oobleck's, GPT-3 6.7B on 30
/// nodes: 5.2406 / 5.5078 samples/s (`varuna_simulator.py` L844-859,
/// `oobleck_simulator.py` L668-683).
pub const VARUNA_VS_OOBLECK: f64 = 5.2406 / 5.5078;
/// Megatron-LM's default restart as the Unicron paper gives it: 9 min in the
/// queue, 14 min of set-up, then recomputing what was lost since the
/// checkpoint (the simulator rolls back).
pub const MEGATRON_RESTART_S: f64 = (9.0 + 14.0) * 60.0;
/// Why Bamboo is not run: Oobleck's artifact models it out of memory for
/// GPT-3 350M, 2.7B and 6.7B (`bamboo_simulator.py` L581, L652, L723:
/// `# OOM`, throughput 0), and every job here is GPT-3 1.3B or larger.
pub const BAMBOO_OOM: &str = "out of memory for GPT-3 350M and larger in Oobleck's artifact (bamboo_simulator.py L581/652/723)";

/// Every way back in of a system that knows one: `s` seconds.
fn every_transition(s: f64, resume_s: f64) -> Transitions {
    Transitions {
        reattempt_s: s,
        restart_replica_s: s,
        restart_checkpoint_s: s,
        reconfigure_s: s,
        resume_s,
    }
}

/// Seconds to move one rank's training state through the agent at the
/// measured rate, for the largest per-rank state of `scenario`'s jobs. The
/// ranks of a node move theirs at once, each on its own stream (an
/// ASSUMPTION: the measurement had one rank).
pub fn state_move_s(scenario: &Scenario) -> f64 {
    (0..scenario.jobs as usize)
        .map(|i| scenario.workload.job(i).0)
        .map(|m| STATE_BYTES_PER_PARAMETER * m.parameters / f64::from(m.replica_gpus))
        .fold(0.0, f64::max)
        / (MEASURED_STATE_MB_S * 1e6)
}

/// unicron's transitions: the agent's measured restart and reconfiguration
/// plus the state moved at the measured rate, times `scenario`'s cost
/// factor; a restart from the checkpoint (no replica left) and a first
/// start as for every policy.
pub fn unicron_transitions(scenario: &Scenario) -> Transitions {
    let f = scenario.unicron_cost_factor;
    let state = state_move_s(scenario);
    Transitions {
        reattempt_s: f * (MEASURED_RESTART_S + state),
        restart_replica_s: f * (MEASURED_RESTART_S + state),
        restart_checkpoint_s: Transitions::default().restart_checkpoint_s,
        reconfigure_s: f * (MEASURED_RECONFIGURE_S + state),
        resume_s: Transitions::default().resume_s,
    }
}

/// The systems compared on `scenario`: unicron, Megatron's
/// checkpoint-restart, the elastic baselines from Oobleck's artifact, and
/// `elastic-single-job`: unicron with the cluster-wide plan taken away (the
/// hit job shrinks, no job moves for another), to show what the plan adds.
pub fn policies(scenario: &Scenario) -> Vec<PolicyModel> {
    let unicron = unicron_transitions(scenario);
    let resume_s = unicron.resume_s;
    let all_but_node_loss: Vec<FailureKind> = faults::MIX
        .iter()
        .map(|(k, _)| *k)
        // A stall's own line comes at the collective timeout already.
        .filter(|k| {
            !matches!(
                k,
                FailureKind::LostConnection | FailureKind::NcclTimeout | FailureKind::TaskHang
            )
        })
        .collect();
    let base = PolicyModel {
        name: "unicron",
        planner: PolicyName::Unicron,
        late: Vec::new(),
        blind_to_hangs: false,
        transitions: unicron.clone(),
        throughput_factor: 1.0,
        checkpoint_interval_s: None,
        restart_rolls_back: false,
        reconfigure_rolls_back: false,
        cannot_run: None,
    };
    vec![
        base.clone(),
        PolicyModel {
            name: "checkpoint-restart",
            planner: PolicyName::CheckpointRestart,
            // A dead node shows to its peers as a collective that never ends.
            late: [&UNWATCHED_LINES[..], &[FailureKind::LostConnection]].concat(),
            blind_to_hangs: true,
            transitions: every_transition(MEGATRON_RESTART_S, resume_s),
            restart_rolls_back: true,
            reconfigure_rolls_back: true,
            ..base.clone()
        },
        PolicyModel {
            name: "elastic-single-job",
            planner: PolicyName::ElasticSingleJob,
            ..base.clone()
        },
        // Oobleck's agent watches node loss only ("For now only consider
        // node failure, not worker failure", `oobleck/elastic/agent.py`
        // L97-98); anything else stalls the job until the collective
        // timeout, after which it is resubmitted as Megatron's is (an
        // ASSUMPTION: its code would leave it dead).
        PolicyModel {
            name: "oobleck",
            planner: PolicyName::ElasticSingleJob,
            late: all_but_node_loss,
            blind_to_hangs: true,
            transitions: Transitions {
                reconfigure_s: OOBLECK_RECONFIGURE_S,
                ..every_transition(MEGATRON_RESTART_S, resume_s)
            },
            restart_rolls_back: true,
            ..base.clone()
        },
        // Varuna: every change is a checkpointed restart that rolls back;
        // it checkpoints every 10 iterations at 120 s; its manager restarts
        // crashed workers and checks for hangs (`varuna/catch_all.py`).
        PolicyModel {
            name: "varuna",
            planner: PolicyName::ElasticSingleJob,
            late: UNWATCHED_LINES.to_vec(),
            blind_to_hangs: true,
            transitions: every_transition(VARUNA_RESTART_S, resume_s),
            throughput_factor: VARUNA_VS_OOBLECK * (10.0 * VARUNA_ITERATION_S)
                / (10.0 * VARUNA_ITERATION_S + VARUNA_CHECKPOINT_S),
            checkpoint_interval_s: Some((10.0 * VARUNA_ITERATION_S + VARUNA_CHECKPOINT_S) as i64),
            restart_rolls_back: true,
            reconfigure_rolls_back: true,
            ..base.clone()
        },
        PolicyModel {
            name: "bamboo",
            planner: PolicyName::ElasticSingleJob,
            cannot_run: Some(BAMBOO_OOM),
            ..base
        },
    ]
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
    /// Per failure kind: (failures that hit, total downtime in seconds
    /// from the injection until the job ran again).
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
        let entry = downtime_by_kind
            .entry(fault.kind.symbol().to_string())
            .or_default();
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

fn mean(values: &[f64]) -> f64 {
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

/// The table `unicron evaluate` prints (Markdown, so it goes into the docs
/// as it is): per policy its WAF, spread and downtime, and unicron's ratio
/// over it with the range over seeds.
pub fn table(e: &Evaluation) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let s = &e.scenario;
    let _ = writeln!(
        out,
        "scenario `{}`: {} GPUs, {} jobs, {} h, a failure every {:.0} min on average ({}x the paper setting's rate; {} in the seeds' traces), collective timeout {:.0} min, repair {:.1} h, unicron's costs x{}, {} seed(s)\n",
        s.name,
        s.nodes * 8,
        s.jobs,
        s.hours,
        s.mtbf_s / 60.0,
        s.rate,
        e.trace_lengths
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        s.collective_timeout_s / 60.0,
        s.repair_s / 3_600.0,
        s.unicron_cost_factor,
        e.seeds
    );
    let _ = writeln!(
        out,
        "| policy | WAF of ideal | spread (σ) | downtime (job-h) | failures that hit a job | unicron's WAF over it (range over seeds) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    let unicron = e.policies.get("unicron");
    for policy in policies(s) {
        let n = policy.name;
        if let Some(why) = e.not_run.get(n) {
            let _ = writeln!(out, "| {n} | not run: {why} | | | | |");
            continue;
        }
        let Some(r) = e.policies.get(n) else {
            continue;
        };
        let hits = mean(&r.runs.iter().map(|x| x.failures as f64).collect::<Vec<_>>());
        let versus = match unicron.and_then(|u| Some((u.ratio.get(n)?, u.ratio_range.get(n)?))) {
            Some((x, (lo, hi))) => format!("{x:.2}x ({lo:.2}-{hi:.2})"),
            None => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {n} | {:.1}% | {:.1}% | {:.1} | {hits:.0} | {versus} |",
            r.waf_fraction * 100.0,
            r.waf_fraction_std * 100.0,
            r.downtime_h,
        );
    }
    out
}

/// Mean downtime per failure that hit a job, minutes, by kind (rows) and
/// policy (columns): from the injection until the job ran again.
pub fn downtime_table(e: &Evaluation) -> String {
    use std::fmt::Write;
    let names: Vec<&str> = policies(&e.scenario)
        .iter()
        .map(|p| p.name)
        .filter(|n| e.policies.contains_key(*n))
        .collect();
    let mut kinds = std::collections::BTreeSet::new();
    for r in e.policies.values() {
        for run in &r.runs {
            kinds.extend(run.downtime_by_kind.keys().cloned());
        }
    }
    let mut out = String::from("| failure kind |");
    for n in &names {
        let _ = write!(out, " {n} |");
    }
    let _ = writeln!(out, "\n|---|{}", "---:|".repeat(names.len()));
    for kind in kinds {
        let _ = write!(out, "| {kind} |");
        for n in &names {
            let (count, seconds) = e.policies[*n]
                .runs
                .iter()
                .filter_map(|run| run.downtime_by_kind.get(&kind))
                .fold((0, 0.0), |(c, t), (n, s)| (c + n, t + s));
            if count == 0 {
                let _ = write!(out, " — |");
            } else {
                let _ = write!(out, " {:.1} |", seconds / count as f64 / 60.0);
            }
        }
        let _ = writeln!(out);
    }
    out
}

const COLORS: [&str; 6] = [
    "#1b6ac9", "#c9341b", "#2a9d3a", "#8a4fc9", "#c98a1b", "#1bb5c9",
];

/// An SVG frame with a title, a y axis of 0-`y_max` and an x label.
fn frame(title: &str, x_label: &str, y_ticks: &[(f64, String)], out: &mut String) {
    use std::fmt::Write;
    let (w, h, pad) = (720.0, 360.0, 56.0);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r##"<rect width="{w}" height="{h}" fill="#fff"/>"##);
    for (y, label) in y_ticks {
        let _ = writeln!(
            out,
            r##"<line x1="{pad}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="4" y="{:.1}">{label}</text>"##,
            w - pad,
            y + 4.0,
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}">{x_label}</text><text x="{pad}" y="20">{title}</text>"#,
        w / 2.0 - 60.0,
        h - 12.0,
    );
}

/// An SVG line chart of the accumulated useful work over time, one line
/// per policy, on the first seed: weighted FLOPs done so far as a share of
/// what the no-failure ideal does in the whole run (the dashed diagonal).
pub fn svg(e: &Evaluation) -> String {
    use std::fmt::Write;
    let (w, h, pad) = (720.0, 360.0, 56.0);
    let hours = e.scenario.hours.max(1.0);
    let x = |t: f64| pad + (w - 2.0 * pad) * t / hours;
    let y = |f: f64| h - pad - (h - 2.0 * pad) * f.clamp(0.0, 1.0);
    let ticks: Vec<(f64, String)> = [0.0, 0.25, 0.5, 0.75, 1.0]
        .iter()
        .map(|t| (y(*t), format!("{:.0}%", t * 100.0)))
        .collect();
    let mut out = String::new();
    frame(
        &format!(
            "useful work done so far, share of the ideal's whole run, seed 1 — scenario {}",
            e.scenario.name
        ),
        "simulated hours",
        &ticks,
        &mut out,
    );
    let step = if hours > 48.0 { 24.0 } else { 6.0 };
    let mut t = 0.0;
    while t <= hours {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}">{t}</text>"#,
            x(t) - 6.0,
            h - pad + 16.0
        );
        t += step;
    }
    let _ = writeln!(
        out,
        r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}">no-failure ideal</text>"##,
        x(0.0),
        y(0.0),
        x(hours),
        y(1.0),
        x(hours) - 110.0,
        y(1.0) - 6.0
    );
    let list = policies(&e.scenario);
    for (i, policy) in list.iter().enumerate() {
        let Some(run) = e.policies.get(policy.name).and_then(|r| r.runs.first()) else {
            continue;
        };
        let line: Vec<String> = std::iter::once((0.0, 0.0))
            .chain(run.timeline.iter().map(|(t, f)| (*t, f * t / hours)))
            .map(|(t, f)| format!("{:.1},{:.1}", x(t), y(f)))
            .collect();
        let color = COLORS[i % COLORS.len()];
        let final_share = run.waf_fraction * 100.0;
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/><text x="{}" y="{}" fill="{color}">{} ({final_share:.1}%)</text>"#,
            line.join(" "),
            pad + 8.0,
            pad + 16.0 * i as f64,
            policy.name
        );
    }
    out.push_str("</svg>\n");
    out
}

/// The scenarios `unicron evaluate --scenario rates` runs: the paper
/// setting at every failure rate, lowest first.
pub const RATE_SWEEP: [&str; 5] = ["rate-0.25x", "rate-0.5x", "paper", "rate-2x", "rate-4x"];

/// The policies `e` ran other than unicron, in the order of [`policies`].
fn baselines(e: &Evaluation) -> Vec<&'static str> {
    policies(&e.scenario)
        .iter()
        .map(|p| p.name)
        .filter(|n| *n != "unicron" && e.policies.contains_key(*n))
        .collect()
}

/// unicron's WAF over each baseline's at every rate of a sweep, with the
/// range over seeds (Markdown).
pub fn ratio_table(evaluations: &[Evaluation]) -> String {
    use std::fmt::Write;
    let Some(first) = evaluations.first() else {
        return String::new();
    };
    let names = baselines(first);
    let mut out = String::from("| failure rate |");
    for b in &names {
        let _ = write!(out, " vs {b} |");
    }
    let _ = writeln!(out, "\n|---:|{}", "---:|".repeat(names.len()));
    for e in evaluations {
        let _ = write!(out, "| {}x |", e.scenario.rate);
        let u = e.policies.get("unicron");
        for b in &names {
            match u.and_then(|u| Some((u.ratio.get(*b)?, u.ratio_range.get(*b)?))) {
                Some((x, (lo, hi))) => {
                    let _ = write!(out, " {x:.2}x ({lo:.2}-{hi:.2}) |");
                }
                None => {
                    let _ = write!(out, " — |");
                }
            }
        }
        let _ = writeln!(out);
    }
    out
}

/// An SVG chart of unicron's WAF over each baseline's against the failure
/// rate, one line per baseline, from evaluations of one setting at several
/// rates (mean over seeds, the range over seeds as a bar).
pub fn ratio_svg(evaluations: &[Evaluation]) -> String {
    use std::fmt::Write;
    let (w, h, pad) = (720.0, 360.0, 56.0);
    let mut rates: Vec<f64> = evaluations.iter().map(|e| e.scenario.rate).collect();
    rates.sort_by(f64::total_cmp);
    let (lo, hi) = (
        rates.first().copied().unwrap_or(1.0).log2(),
        rates.last().copied().unwrap_or(1.0).log2(),
    );
    let x = |r: f64| pad + (w - 2.0 * pad) * (r.log2() - lo) / (hi - lo).max(1e-9);
    let top = evaluations
        .iter()
        .filter_map(|e| e.policies.get("unicron"))
        .flat_map(|u| u.ratio_range.values().map(|(_, hi)| *hi))
        .fold(1.0_f64, f64::max)
        .ceil()
        .max(2.0);
    let y = |v: f64| h - pad - (h - 2.0 * pad) * (v / top).clamp(0.0, 1.0);
    let ticks: Vec<(f64, String)> = (0..=(top * 2.0) as u32)
        .map(|k| f64::from(k) / 2.0)
        .map(|v| (y(v), format!("{v:.1}x")))
        .collect();
    let mut out = String::new();
    frame(
        "unicron's WAF over each baseline's against the failure rate",
        "failure rate, multiple of the paper setting's (log scale)",
        &ticks,
        &mut out,
    );
    for r in &rates {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}">{r}x</text>"#,
            x(*r) - 8.0,
            h - pad + 16.0
        );
    }
    let Some(first) = evaluations.first() else {
        out.push_str("</svg>\n");
        return out;
    };
    for (i, name) in baselines(first).iter().enumerate() {
        let mut points = Vec::new();
        for e in evaluations {
            let Some(u) = e.policies.get("unicron") else {
                continue;
            };
            if let (Some(v), Some((a, b))) = (u.ratio.get(*name), u.ratio_range.get(*name)) {
                points.push((e.scenario.rate, *v, *a, *b));
            }
        }
        if points.is_empty() {
            continue;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = COLORS[(i + 1) % COLORS.len()];
        let line: Vec<String> = points
            .iter()
            .map(|(r, v, _, _)| format!("{:.1},{:.1}", x(*r), y(*v)))
            .collect();
        for (r, _, a, b) in &points {
            let _ = writeln!(
                out,
                r#"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="{color}"/>"#,
                x(*r),
                y(*a),
                y(*b)
            );
        }
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/><text x="{}" y="{}" fill="{color}">vs {name}</text>"#,
            line.join(" "),
            pad + 8.0,
            pad + 16.0 * i as f64 + 16.0,
        );
    }
    let one = y(1.0);
    let _ = writeln!(
        out,
        r##"<line x1="{pad}" x2="{}" y1="{one:.1}" y2="{one:.1}" stroke="#333" stroke-dasharray="4 3"/>"##,
        w - pad
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smoke() -> Scenario {
        scenarios().into_iter().find(|s| s.name == "smoke").unwrap()
    }

    #[test]
    fn every_policy_is_fed_the_same_trace_and_idle_nodes_make_no_ops() {
        // Four times smoke's rate: a dozen failures in six hours.
        let s = Scenario {
            mtbf_s: smoke().mtbf_s / 4.0,
            rate: 8.0,
            ..smoke()
        };
        let trace = s.trace(2);
        assert!(trace.len() >= 8, "{trace:?}");
        // Drawn over every node, whatever runs there.
        let nodes: std::collections::BTreeSet<&str> =
            trace.iter().map(|e| e.node.as_str()).collect();
        assert!(nodes.len() > 3, "{nodes:?}");
        let runs: Vec<(&str, Run)> = policies(&s)
            .iter()
            .filter(|p| p.cannot_run.is_none())
            .map(|p| (p.name, run(&s, p, 2, &trace)))
            .collect();
        let written = faults::write_trace(&trace);
        for (name, r) in &runs {
            assert_eq!(r.offered_csv, written, "{name}: the trace it reached");
            assert_eq!(r.offered as usize, trace.len(), "{name}");
            assert!(r.failures <= r.offered, "{name}: {r:?}");
            assert!(
                r.waf_fraction > 0.0 && r.waf_fraction < 1.0,
                "{name}: {r:?}"
            );
            assert_eq!(r.timeline.len(), 6);
        }
        // A policy that keeps jobs down longer leaves more of the trace
        // without a running job to hit.
        let hits = |n: &str| runs.iter().find(|(p, _)| *p == n).unwrap().1.failures;
        assert!(
            hits("checkpoint-restart") < hits("unicron"),
            "{} vs {}",
            hits("checkpoint-restart"),
            hits("unicron")
        );
    }

    #[test]
    fn late_detection_and_slow_restarts_cost_the_baseline() {
        let e = evaluate(&smoke(), 2, |_, _| {});
        let unicron = &e.policies["unicron"];
        let baseline = &e.policies["checkpoint-restart"];
        assert!(
            unicron.waf_fraction > baseline.waf_fraction,
            "{}",
            table(&e)
        );
        assert!(unicron.ratio["checkpoint-restart"] > 1.0);
        let (lo, hi) = unicron.ratio_range["checkpoint-restart"];
        assert!(lo <= unicron.ratio["checkpoint-restart"] * 1.0001 && hi >= lo);
        let text = table(&e);
        assert!(text.contains("| unicron |"), "{text}");
        assert!(text.contains("| bamboo | not run: out of memory"), "{text}");
        assert!(!e.policies.contains_key("bamboo"));
        let kinds = downtime_table(&e);
        assert!(kinds.starts_with("| failure kind | unicron |"), "{kinds}");
        let plot = svg(&e);
        assert!(plot.starts_with("<svg") && plot.matches("<polyline").count() == e.policies.len());
        let ratios = ratio_svg(std::slice::from_ref(&e));
        assert!(ratios.contains("vs checkpoint-restart"), "{ratios}");
        let sweep = ratio_table(std::slice::from_ref(&e));
        assert!(sweep.contains("| 2x | "), "{sweep}");
        assert!(!sweep.contains("vs bamboo"), "not run: {sweep}");
    }

    #[test]
    fn unicron_costs_are_the_measured_ones_scaled_with_state() {
        let paper = scenarios().into_iter().find(|s| s.name == "paper").unwrap();
        // GPT-3 6.7B on 8 GPUs a replica: 13.4 GB a rank at 211 MB/s.
        let state = state_move_s(&paper);
        assert!((63.0..64.0).contains(&state), "{state}");
        let t = unicron_transitions(&paper);
        assert!((t.restart_replica_s - (MEASURED_RESTART_S + state)).abs() < 1e-9);
        let doubled = unicron_transitions(&Scenario {
            unicron_cost_factor: 2.0,
            ..paper
        });
        assert!((doubled.reconfigure_s - 2.0 * t.reconfigure_s).abs() < 1e-9);
        assert_eq!(doubled.restart_checkpoint_s, t.restart_checkpoint_s);
    }

    #[test]
    fn evaluation_is_deterministic() {
        let s = smoke();
        let p = &policies(&s)[0];
        assert_eq!(run(&s, p, 9, &s.trace(9)), run(&s, p, 9, &s.trace(9)));
    }
}
