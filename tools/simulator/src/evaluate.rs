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

use crate::config::{SimConfig, Transitions};
use crate::model::Sim;
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

/// The Unicron paper: Megatron learns of hangs and network faults only when the
/// 30-minute NCCL timeout fires; a dead node shows the same way to its peers.
const NCCL_TIMEOUT_MS: i64 = 30 * 60 * 1000;
const LATE_KINDS: [FailureKind; 7] = [
    FailureKind::NcclTimeout,
    FailureKind::NetworkError,
    FailureKind::LinkFlapping,
    FailureKind::ConnectionRefused,
    FailureKind::ConnectionReset,
    FailureKind::TaskHang,
    FailureKind::LostConnection,
];

/// Bamboo-like redundant computation: share of throughput kept in steady
/// state. ASSUMPTION (docs/EVALUATION.md).
pub const BAMBOO_THROUGHPUT: f64 = 0.75;

/// The four systems compared.
pub fn policies() -> Vec<PolicyModel> {
    let unicron = Transitions::default();
    // The Unicron paper: a default restart re-queues (9 min) and sets up (14 min),
    // then recomputes what was lost since the checkpoint (the simulator
    // rolls back); every way back in is such a restart.
    let megatron_restart_s = (9.0 + 14.0) * 60.0;
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
            delay: Some(DetectionDelay {
                kinds: LATE_KINDS.to_vec(),
                delay_ms: NCCL_TIMEOUT_MS,
            }),
            transitions: Transitions {
                reattempt_s: megatron_restart_s,
                restart_replica_s: megatron_restart_s,
                restart_checkpoint_s: megatron_restart_s,
                reconfigure_s: megatron_restart_s,
                resume_s: unicron.resume_s,
            },
            throughput_factor: 1.0,
        },
        PolicyModel {
            name: "elastic-single-job",
            planner: PolicyName::ElasticSingleJob,
            delay: None,
            transitions: unicron.clone(),
            throughput_factor: 1.0,
        },
        PolicyModel {
            name: "bamboo-like",
            planner: PolicyName::ElasticSingleJob,
            delay: None,
            // ASSUMPTION: the redundant stage takes over a lost node's work
            // in about half a minute.
            transitions: Transitions {
                reconfigure_s: 30.0,
                ..unicron
            },
            throughput_factor: BAMBOO_THROUGHPUT,
        },
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
}

fn scenario(name: &str, nodes: u32, jobs: u32, hours: f64, rate: f64) -> Scenario {
    let gpus = f64::from(nodes * 8);
    Scenario {
        name: name.to_string(),
        nodes,
        jobs,
        hours,
        mtbf_s: crate::config::GPU_HOURS_PER_FAILURE / gpus * 3_600.0 / rate,
    }
}

/// Every named scenario.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario("paper", 16, 4, 7.0 * 24.0, 1.0),
        scenario("gpus-1024", 128, 16, 24.0, 1.0),
        scenario("gpus-10240", 1_280, 64, 4.0, 1.0),
        scenario("rate-0.25x", 16, 4, 7.0 * 24.0, 0.25),
        scenario("rate-0.5x", 16, 4, 7.0 * 24.0, 0.5),
        scenario("rate-2x", 16, 4, 7.0 * 24.0, 2.0),
        scenario("rate-4x", 16, 4, 7.0 * 24.0, 4.0),
        scenario("smoke", 8, 2, 6.0, 2.0),
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
        seed,
        mtbf_s: Some(scenario.mtbf_s),
        transitions: policy.transitions.clone(),
        throughput_factor: policy.throughput_factor,
        // Telemetry and noise change no decision here; fewer records
        // make week-long runs of thousands of GPUs affordable.
        telemetry_interval_s: 300.0,
        noise_interval_s: 3_600.0,
        ..SimConfig::default()
    };
    let planner = PlannerConfig {
        policy: policy.planner,
        ..PlannerConfig::default()
    };
    let mut offline = Offline::new(Sim::new(config, None), DetectorConfig::default(), planner);
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

/// Runs every policy on seeds 1..=`seeds`.
pub fn evaluate(
    scenario: &Scenario,
    seeds: u64,
    mut progress: impl FnMut(&str, u64),
) -> Evaluation {
    let mut policies = BTreeMap::new();
    for policy in policies_list() {
        let runs: Vec<Run> = (1..=seeds)
            .map(|seed| {
                progress(policy.name, seed);
                run(scenario, &policy, seed)
            })
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
    let colors = ["#1b6ac9", "#c9341b", "#2a9d3a", "#8a4fc9"];
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
            text.contains("| unicron |") && text.contains("vs bamboo-like"),
            "{text}"
        );
        let plot = svg(&e);
        assert!(plot.starts_with("<svg") && plot.matches("<polyline").count() == 4);
    }

    #[test]
    fn evaluation_is_deterministic() {
        let s = smoke();
        let p = &policies()[0];
        assert_eq!(run(&s, p, 9), run(&s, p, 9));
    }
}
