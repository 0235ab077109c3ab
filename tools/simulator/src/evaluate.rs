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

use crate::config::{SimConfig, Transitions, Workload};
// The Unicron paper: Megatron learns of hangs and network faults only when
// the 30-minute NCCL timeout fires; a dead node shows the same way to its
// peers. The simulator's watchdog ends a hang nobody acted on at that time.
use crate::model::{NCCL_TIMEOUT_MS, Sim};
use crate::offline::{DetectionDelay, Offline};

/// One recovery system as the evaluation models it.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyModel {
    pub name: &'static str,
    pub planner: PolicyName,
    /// Failures the system learns of late (Megatron: at the NCCL timeout).
    pub delay: Option<DetectionDelay>,
    pub transitions: Transitions,
    pub throughput_factor: f64,
}

/// The kinds the elastic baselines also learn of only at the NCCL
/// timeout: they watch for a lost node or process (a TCP disconnect, a
/// preemption notice), not for a job that hangs with every process alive.
/// ASSUMPTION for Oobleck and Bamboo (nothing else in their code watches
/// hangs); Varuna checks progress every 30 minutes (`catch_all.py`).
const HANG_KINDS: [FailureKind; 6] = [
    FailureKind::NcclTimeout,
    FailureKind::NetworkError,
    FailureKind::LinkFlapping,
    FailureKind::ConnectionRefused,
    FailureKind::ConnectionReset,
    FailureKind::TaskHang,
];

/// Oobleck: re-instantiating pipelines from templates after a node loss,
/// GPT-3 6.7B: 10 s (the authors' SOSP '23 artifact simulator,
/// `local_rendezvous_timeout_delta`; docs/EVALUATION.md).
pub const OOBLECK_RECONFIGURE_S: f64 = 10.0;
/// Varuna: every change of GPUs is a checkpoint and a restart ("job
/// morphing"), GPT-3 6.7B: 701 s including a 120 s checkpoint (Oobleck's
/// artifact, `varuna_simulator.py`).
pub const VARUNA_RESTART_S: f64 = 701.0;
/// Bamboo: a fatal failure means a global rendezvous of 30 s (Bamboo's own
/// simulator, `global_rendezvous_timeout_delta`).
pub const BAMBOO_RENDEZVOUS_S: f64 = 30.0;
/// Bamboo's redundant computation: share of Megatron's failure-free
/// throughput kept. ASSUMPTION: no source gives it against Megatron;
/// Oobleck's artifact models Bamboo at 0.25-0.32 of Oobleck on BERT-large
/// and GPT-2 and out of memory from GPT-3 350M up, so 0.75 is generous.
pub const BAMBOO_THROUGHPUT: f64 = 0.75;
/// Oobleck's and Varuna's failure-free throughput against Megatron's on the
/// same model and GPUs. ASSUMPTION: equal; no source was found
/// (docs/EVALUATION.md), which favours them.
pub const ELASTIC_THROUGHPUT: f64 = 1.0;

fn late(kinds: &[FailureKind]) -> Option<DetectionDelay> {
    Some(DetectionDelay {
        kinds: kinds.to_vec(),
        delay_ms: NCCL_TIMEOUT_MS,
    })
}

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

/// The systems compared: unicron, Megatron's checkpoint-restart, the
/// elastic baselines as their authors describe them, and
/// `elastic-single-job`: unicron with the cluster-wide plan taken away (the
/// hit job shrinks, no job moves for another), to show what the plan adds.
pub fn policies() -> Vec<PolicyModel> {
    let unicron = Transitions::default();
    // The Unicron paper: a default restart re-queues (9 min) and sets up (14 min),
    // then recomputes what was lost since the checkpoint (the simulator
    // rolls back); every way back in is such a restart.
    let megatron_restart_s = (9.0 + 14.0) * 60.0;
    let elastic = |name, delay, transitions, throughput_factor| PolicyModel {
        name,
        planner: PolicyName::ElasticSingleJob,
        delay,
        transitions,
        throughput_factor,
    };
    vec![
        PolicyModel {
            name: "unicron",
            planner: PolicyName::Unicron,
            delay: None,
            transitions: unicron.clone(),
            throughput_factor: 1.0,
        },
        PolicyModel {
            name: "checkpoint-restart",
            planner: PolicyName::CheckpointRestart,
            delay: late(&[&HANG_KINDS[..], &[FailureKind::LostConnection]].concat()),
            transitions: every_transition(megatron_restart_s, unicron.resume_s),
            throughput_factor: 1.0,
        },
        elastic("elastic-single-job", None, unicron.clone(), 1.0),
        elastic(
            "oobleck",
            late(&HANG_KINDS),
            every_transition(OOBLECK_RECONFIGURE_S, unicron.resume_s),
            ELASTIC_THROUGHPUT,
        ),
        elastic(
            "varuna",
            late(&HANG_KINDS),
            every_transition(VARUNA_RESTART_S, unicron.resume_s),
            ELASTIC_THROUGHPUT,
        ),
        elastic(
            "bamboo",
            late(&HANG_KINDS),
            every_transition(BAMBOO_RENDEZVOUS_S, unicron.resume_s),
            BAMBOO_THROUGHPUT,
        ),
    ]
}

/// A cluster, its jobs, its failure rate and how long to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    pub nodes: u32,
    pub jobs: u32,
    pub hours: f64,
    /// Mean time between failures of the whole cluster, seconds.
    pub mtbf_s: f64,
    pub workload: Workload,
}

fn scenario(name: &str, nodes: u32, jobs: u32, hours: f64, rate: f64) -> Scenario {
    let gpus = f64::from(nodes * 8);
    Scenario {
        name: name.to_string(),
        nodes,
        jobs,
        hours,
        mtbf_s: crate::config::GPU_HOURS_PER_FAILURE / gpus * 3_600.0 / rate,
        workload: Workload::Uniform,
    }
}

/// Every named scenario.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario("paper", 16, 4, 7.0 * 24.0, 1.0),
        scenario("gpus-1024", 128, 16, 24.0, 1.0),
        scenario("gpus-10240", 1_280, 64, 7.0 * 24.0, 1.0),
        scenario("rate-0.25x", 16, 4, 7.0 * 24.0, 0.25),
        scenario("rate-0.5x", 16, 4, 7.0 * 24.0, 0.5),
        scenario("rate-2x", 16, 4, 7.0 * 24.0, 2.0),
        scenario("rate-4x", 16, 4, 7.0 * 24.0, 4.0),
        scenario("smoke", 8, 2, 6.0, 2.0),
        // Jobs that differ: where a node goes after a failure matters.
        Scenario {
            workload: Workload::Heterogeneous,
            ..scenario("heterogeneous", 128, 8, 7.0 * 24.0, 1.0)
        },
    ]
}

/// One policy, one seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub seed: u64,
    pub waf_fraction: f64,
    pub downtime_s: f64,
    /// Failures that hit a running job.
    pub failures: u64,
    /// Failures offered in all: those that found no running job (every job
    /// already down) are skipped, so policies differ in `failures` only.
    pub offered: u64,
    pub commands: u64,
    /// (hours, accumulated WAF fraction so far), once a simulated hour.
    pub timeline: Vec<(f64, f64)>,
}

/// Runs `policy` on `scenario` with `seed`: the same seed gives every
/// policy the same failures at the same times.
pub fn run(scenario: &Scenario, policy: &PolicyModel, seed: u64) -> Run {
    let config = SimConfig {
        nodes: scenario.nodes,
        jobs: scenario.jobs,
        workload: scenario.workload,
        seed,
        mtbf_s: Some(scenario.mtbf_s),
        transitions: policy.transitions.clone(),
        throughput_factor: policy.throughput_factor,
        // The sparse feed emits neither; set as the records-mode
        // comparison in `offline` sets them.
        telemetry_interval_s: 300.0,
        noise_interval_s: 3_600.0,
        ..SimConfig::default()
    };
    let planner = PlannerConfig {
        policy: policy.planner,
        // Alternatives explain a decision to an auditor and change none;
        // each costs a solve of the whole cluster, which a comparison of
        // policies does not need (nor the digest, see `run`'s loop).
        alternatives: 1,
        ..PlannerConfig::default()
    };
    let sim = Sim::new(config, None).with_sparse_feed();
    let mut offline = Offline::new(sim, DetectorConfig::default(), planner).without_digests();
    if let Some(delay) = &policy.delay {
        offline = offline.with_detection_delay(delay.clone());
    }
    let mut timeline = Vec::new();
    let steps = scenario.hours.ceil() as u64;
    let mut summary = None;
    for hour in 1..=steps {
        let s = offline.run_for((hour as f64).min(scenario.hours) * 3_600.0);
        timeline.push(((hour as f64).min(scenario.hours), s.waf_fraction));
        summary = Some(s);
    }
    let summary = summary.expect("at least one hour");
    Run {
        seed,
        waf_fraction: summary.waf_fraction,
        downtime_s: summary.downtime_s.values().sum(),
        failures: summary.failures_injected,
        offered: summary.failures_injected + summary.failures_skipped,
        commands: summary.commands_executed,
        timeline,
    }
}

/// Mean and spread of one policy over the seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyResult {
    pub waf_fraction: f64,
    pub waf_fraction_std: f64,
    pub downtime_h: f64,
    /// This policy's WAF over each other policy's.
    pub ratio: BTreeMap<String, f64>,
    pub runs: Vec<Run>,
}

/// Everything `unicron evaluate` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub scenario: Scenario,
    pub seeds: u64,
    pub policies: BTreeMap<String, PolicyResult>,
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn std_dev(values: &[f64]) -> f64 {
    let m = mean(values);
    (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / values.len().max(1) as f64).sqrt()
}

/// Runs every policy on seeds 1..=`seeds`, the runs spread over the
/// machine's cores (each run is a function of its inputs, so the order
/// they finish in changes nothing). `progress` hears of each run as it
/// starts.
pub fn evaluate(
    scenario: &Scenario,
    seeds: u64,
    progress: impl Fn(&str, u64) + Sync,
) -> Evaluation {
    let list = policies_list();
    let work: Vec<(usize, u64)> = (0..list.len())
        .flat_map(|p| (1..=seeds).map(move |seed| (p, seed)))
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
                    let result = run(scenario, &list[p], seed);
                    done.lock()
                        .expect("no worker panics holding it")
                        .insert((p, seed), result);
                }
            });
        }
    });
    let mut done = done.into_inner().expect("workers joined");
    let mut policies = BTreeMap::new();
    for (p, policy) in list.iter().enumerate() {
        let runs: Vec<Run> = (1..=seeds)
            .map(|seed| done.remove(&(p, seed)).expect("every run finished"))
            .collect();
        let waf: Vec<f64> = runs.iter().map(|r| r.waf_fraction).collect();
        let downtime: Vec<f64> = runs.iter().map(|r| r.downtime_s / 3_600.0).collect();
        policies.insert(
            policy.name.to_string(),
            PolicyResult {
                waf_fraction: mean(&waf),
                waf_fraction_std: std_dev(&waf),
                downtime_h: mean(&downtime),
                ratio: BTreeMap::new(),
                runs,
            },
        );
    }
    let means: BTreeMap<String, f64> = policies
        .iter()
        .map(|(k, v)| (k.clone(), v.waf_fraction))
        .collect();
    for (name, result) in &mut policies {
        result.ratio = means
            .iter()
            .filter(|(other, _)| *other != name)
            .map(|(other, w)| {
                (
                    other.clone(),
                    if *w > 0.0 {
                        result.waf_fraction / w
                    } else {
                        0.0
                    },
                )
            })
            .collect();
    }
    Evaluation {
        scenario: scenario.clone(),
        seeds,
        policies,
    }
}

fn policies_list() -> Vec<PolicyModel> {
    policies()
}

/// The table `unicron evaluate` prints (Markdown, so it goes into the docs
/// as it is).
pub fn table(e: &Evaluation) -> String {
    use std::fmt::Write;
    let names: Vec<&str> = policies().iter().map(|p| p.name).collect();
    let mut out = String::new();
    let s = &e.scenario;
    let _ = writeln!(
        out,
        "scenario `{}`: {} GPUs, {} jobs, {} h, a failure every {:.0} min on average, {} seed(s)\n",
        s.name,
        s.nodes * 8,
        s.jobs,
        s.hours,
        s.mtbf_s / 60.0,
        e.seeds
    );
    let _ = write!(
        out,
        "| policy | WAF of ideal | spread (σ) | downtime (job-h) |"
    );
    for n in &names {
        let _ = write!(out, " vs {n} |");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "|---|---:|---:|---:|{}", "---:|".repeat(names.len()));
    for n in &names {
        let Some(r) = e.policies.get(*n) else {
            continue;
        };
        let _ = write!(
            out,
            "| {n} | {:.1}% | {:.1}% | {:.1} |",
            r.waf_fraction * 100.0,
            r.waf_fraction_std * 100.0,
            r.downtime_h
        );
        for other in &names {
            match r.ratio.get(*other) {
                Some(x) => {
                    let _ = write!(out, " {x:.2}x |");
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

/// An SVG line chart of accumulated WAF over time, one line per policy
/// (mean over seeds). Hand-written: a few dozen lines of SVG need no plot
/// library.
pub fn svg(e: &Evaluation) -> String {
    use std::fmt::Write;
    let (w, h, pad) = (720.0, 360.0, 48.0);
    let hours = e.scenario.hours.max(1.0);
    let colors = [
        "#1b6ac9", "#c9341b", "#2a9d3a", "#8a4fc9", "#c98a1b", "#1bb5c9",
    ];
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r##"<rect width="{w}" height="{h}" fill="#fff"/>"##);
    let x = |t: f64| pad + (w - 2.0 * pad) * t / hours;
    let y = |f: f64| h - pad - (h - 2.0 * pad) * f.clamp(0.0, 1.0);
    for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let _ = writeln!(
            out,
            r##"<line x1="{}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="4" y="{}">{:.0}%</text>"##,
            pad,
            w - pad,
            y(tick) + 4.0,
            tick * 100.0,
            y = y(tick)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}">simulated hours (0–{hours})</text><text x="{pad}" y="20">accumulated WAF of the no-failure ideal — scenario {}</text>"#,
        w / 2.0 - 60.0,
        h - 12.0,
        e.scenario.name
    );
    for (i, policy) in policies().iter().enumerate() {
        let Some(r) = e.policies.get(policy.name) else {
            continue;
        };
        let points = r.runs.first().map_or(0, |run| run.timeline.len());
        let line: Vec<String> = (0..points)
            .map(|k| {
                let t = r.runs[0].timeline[k].0;
                let f = mean(
                    &r.runs
                        .iter()
                        .filter_map(|run| run.timeline.get(k).map(|p| p.1))
                        .collect::<Vec<_>>(),
                );
                format!("{:.1},{:.1}", x(t), y(f))
            })
            .collect();
        let color = colors[i % colors.len()];
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/><text x="{}" y="{}" fill="{color}">{}</text>"#,
            line.join(" "),
            w - pad - 150.0,
            pad + 16.0 * i as f64 + 16.0,
            policy.name
        );
    }
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
    fn every_policy_runs_on_the_same_failures() {
        let s = smoke();
        let runs: Vec<Run> = policies().iter().map(|p| run(&s, p, 2)).collect();
        assert!(runs[0].failures >= 2, "{:?}", runs[0]);
        assert!(
            runs.iter().all(|r| r.offered == runs[0].offered),
            "{runs:?}"
        );
        for r in &runs {
            assert!(r.waf_fraction > 0.0 && r.waf_fraction < 1.0, "{r:?}");
            assert_eq!(r.timeline.len(), 6);
        }
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
        let text = table(&e);
        assert!(
            text.contains("| unicron |") && text.contains("vs bamboo"),
            "{text}"
        );
        let plot = svg(&e);
        assert!(plot.starts_with("<svg") && plot.matches("<polyline").count() == policies().len());
    }

    #[test]
    fn evaluation_is_deterministic() {
        let s = smoke();
        let p = &policies()[0];
        assert_eq!(run(&s, p, 9), run(&s, p, 9));
    }
}
