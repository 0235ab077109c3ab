//! `unicron replay`: re-derive every failure, decision and command from the
//! recorded inputs and compare; or, with `--policy` / `--what-if-config`,
//! show what another policy or configuration would have done instead.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;
use unicron_core::detector::Detector;
use unicron_core::planner::{POLICY_VERSION, Planner, PlannerConfig, PolicyName};
use unicron_core::replay::{
    self, CommandDiff, Comparison, RecordedStep, compare_failures, detect_in_order, replay_planner,
};
use unicron_core::signing::CommandSigner;

use crate::cli::UsageError;
use crate::config::Config;
use crate::history::{History, HistoryArgs, Needs, TopicNames};

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub history: HistoryArgs,
    /// Only this cluster.
    #[arg(long, value_name = "ID")]
    pub cluster: Option<String>,
    /// Compare only decisions and failures at or after this time (RFC 3339 or ms since the epoch).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub since: Option<i64>,
    /// Compare only decisions and failures before this time.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<i64>,
    /// What-if: replay the planner's inputs with this policy instead.
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<PolicyName>,
    /// What-if: replay with the [detector] and [planner] sections of this file.
    #[arg(long, value_name = "FILE")]
    pub what_if_config: Option<PathBuf>,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

fn parse_time(text: &str) -> Result<i64, String> {
    text.parse::<i64>()
        .or_else(|_| unicron_bus::formats::time::rfc3339_ms(text))
        .map_err(|_| format!("`{text}` is neither RFC 3339 nor ms since the epoch"))
}

fn parse_policy(text: &str) -> Result<PolicyName, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string())).map_err(|_| {
        format!("`{text}`: policy must be unicron, checkpoint-restart or elastic-single-job")
    })
}

/// The replay report (`--json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub records_replayed: u64,
    pub undecodable_records: u64,
    pub decisions_compared: u64,
    pub identical: u64,
    pub diverged: u64,
    pub decisions: Comparison,
    pub failures: Comparison,
    pub policy_version_recorded: Vec<String>,
    pub policy_version_now: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
}

/// What another policy or configuration would have changed.
#[derive(Debug, Serialize)]
pub struct WhatIf {
    pub policy: String,
    pub commands: CommandDiff,
    pub failures_added: u64,
    pub failures_removed: u64,
    /// Accumulated WAF the planner's model gives each decision stream,
    /// weighted FLOP-seconds.
    pub waf_recorded: f64,
    pub waf_what_if: f64,
    pub waf_change_fraction: f64,
}

pub fn run(config: &Config, args: ReplayArgs) -> anyhow::Result<()> {
    let names = TopicNames::new(&config.kafka).with_inputs(&config.detector.inputs);
    let origin = args.history.origin(&config.kafka)?;
    let what_if_config = match &args.what_if_config {
        Some(path) => Some(Config::load(Some(path)).map_err(|e| UsageError(e.to_string()))?),
        None => None,
    };
    // Eight topics and the external inputs to read, then decisions,
    // failures and the what-if.
    let progress = Progress::new(11 + config.detector.inputs.len() as u64);
    let history = History::load(
        &origin,
        names,
        Needs {
            detector_inputs: true,
        },
        &|topic| progress.say(&format!("reading {topic}")),
    )?;
    let report = replay(config, &args, &history, what_if_config.as_ref(), &progress)?;
    progress.done();
    print!("{}", text(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if report.what_if.is_none() && report.diverged > 0 {
        return Err(Diverged(report.diverged).into());
    }
    Ok(())
}

/// Replay found differences: exit code 1, after the report.
#[derive(Debug, thiserror::Error)]
#[error("{0} divergence(s)")]
pub struct Diverged(pub u64);

fn in_window(args: &ReplayArgs, cluster: &str, time_ms: i64) -> bool {
    args.cluster.as_deref().is_none_or(|c| c == cluster)
        && args.since.is_none_or(|s| time_ms >= s)
        && args.until.is_none_or(|u| time_ms < u)
}

/// The recorded steps of `history` (see `unicron_core::replay::steps`).
pub fn steps(history: &History, cluster: Option<&str>) -> Vec<RecordedStep> {
    replay::steps(
        history.decisions.iter().map(|d| &d.record),
        &history.planner_inputs(),
        history.commands.iter().map(|c| &c.record),
        cluster,
    )
}

fn replay(
    config: &Config,
    args: &ReplayArgs,
    history: &History,
    what_if_config: Option<&Config>,
    progress: &Progress,
) -> anyhow::Result<Report> {
    let steps = steps(history, args.cluster.as_deref());
    let recorded_versions: BTreeSet<String> = steps
        .iter()
        .map(|s| s.decision.policy_version.clone())
        .collect();
    // Replay uses the policy the decisions were taken with.
    let recorded_policy = steps
        .first()
        .and_then(|s| parse_policy(&s.decision.policy).ok())
        .unwrap_or(config.planner.tuning.policy);
    let auditor = || CommandSigner::from_seed("replay", [0; 32]);

    progress.say(&format!("replaying {} decisions", steps.len()));
    let tuning = PlannerConfig {
        policy: recorded_policy,
        ..config.planner.tuning.clone()
    };
    let mut planner = Planner::new(tuning.clone(), auditor());
    let (decisions, _) = replay_planner(&mut planner, &steps, |s| {
        in_window(args, &s.decision.cluster, s.decision.time_ms)
    });

    progress.say("re-deriving failures");
    let observations = history.observations(args.cluster.as_deref());
    // The archive keeps no external input topic: failures found on one
    // cannot be re-derived from it, so they are not compared.
    let unreadable: Vec<&str> = if args.history.from_archive.is_some() {
        config
            .detector
            .inputs
            .iter()
            .map(|i| i.topic.as_str())
            .collect()
    } else {
        Vec::new()
    };
    let recorded_failures: Vec<_> = history
        .failures
        .iter()
        .map(|r| r.record.clone())
        .filter(|f| args.cluster.as_deref().is_none_or(|c| c == f.cluster))
        .filter(|f| {
            f.evidence
                .first()
                .is_none_or(|e| !unreadable.contains(&e.topic.as_str()))
        })
        .collect();
    let mut detector = Detector::new(config.detector.tuning.clone(), config.detector.rules()?);
    let replayed_failures = detect_in_order(&mut detector, observations.clone());
    let failures = compare_failures(&recorded_failures, &replayed_failures, |f| {
        in_window(args, &f.cluster, f.first_evidence_ms)
    });

    let what_if = if args.policy.is_some() || what_if_config.is_some() {
        progress.say("what-if");
        let alt = what_if_config.unwrap_or(config);
        let policy = args.policy.unwrap_or(alt.planner.tuning.policy);
        let mut other = Planner::new(
            PlannerConfig {
                policy,
                ..alt.planner.tuning.clone()
            },
            auditor(),
        );
        let (_, alternative) = replay_planner(&mut other, &steps, |_| false);
        let end = steps.iter().map(|s| s.decision.time_ms).max().unwrap_or(0);
        let waf_recorded = replay::accumulated_waf(steps.iter().map(|s| &s.decision), end);
        let waf_what_if =
            replay::accumulated_waf(alternative.iter().filter_map(|r| r.decision.as_ref()), end);
        let (added, removed) = match what_if_config {
            Some(alt) => {
                let mut d = Detector::new(alt.detector.tuning.clone(), alt.detector.rules()?);
                let found = detect_in_order(&mut d, observations);
                let c = compare_failures(&replayed_failures, &found, |_| true);
                let extra = failures_only_in(&found, &replayed_failures);
                (extra, c.diverged - extra)
            }
            None => (0, 0),
        };
        Some(WhatIf {
            policy: policy.as_str().to_string(),
            commands: replay::diff_commands(&steps, &alternative),
            failures_added: added,
            failures_removed: removed,
            waf_recorded,
            waf_what_if,
            waf_change_fraction: if waf_recorded > 0.0 {
                waf_what_if / waf_recorded - 1.0
            } else {
                0.0
            },
        })
    } else {
        None
    };
    Ok(Report {
        records_replayed: history.len(),
        undecodable_records: history.undecodable,
        decisions_compared: decisions.compared,
        identical: decisions.identical + failures.identical,
        diverged: decisions.diverged + failures.diverged,
        decisions,
        failures,
        policy_version_recorded: recorded_versions.into_iter().collect(),
        policy_version_now: POLICY_VERSION.to_string(),
        what_if,
    })
}

fn failures_only_in(
    list: &[unicron_core::FailureEvent],
    other: &[unicron_core::FailureEvent],
) -> u64 {
    let keys: BTreeSet<_> = other.iter().map(replay::FailureKey::of).collect();
    list.iter()
        .map(replay::FailureKey::of)
        .collect::<BTreeSet<_>>()
        .iter()
        .filter(|k| !keys.contains(k))
        .count() as u64
}

fn text(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "records replayed: {} ({} undecodable, skipped)",
        r.records_replayed, r.undecodable_records
    );
    let _ = writeln!(
        out,
        "decisions compared: {}, identical: {}, diverged: {}{}",
        r.decisions.compared,
        r.decisions.identical,
        r.decisions.diverged,
        if r.decisions.missing_inputs > 0 {
            format!(
                ", inputs no longer in the history: {}",
                r.decisions.missing_inputs
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "failures compared: {}, identical: {}, diverged: {}",
        r.failures.compared, r.failures.identical, r.failures.diverged
    );
    if r.policy_version_recorded
        .iter()
        .any(|v| *v != r.policy_version_now)
    {
        let _ = writeln!(
            out,
            "note: recorded with policy version {}, this binary has {}: decisions may differ by design",
            r.policy_version_recorded.join(", "),
            r.policy_version_now
        );
    }
    for first in [&r.decisions.first_divergence, &r.failures.first_divergence]
        .into_iter()
        .flatten()
    {
        let _ = writeln!(out, "first divergence: {} {}", first.what, first.id);
        let recorded = serde_json::to_string_pretty(&first.recorded).unwrap_or_default();
        let replayed = serde_json::to_string_pretty(&first.replayed).unwrap_or_default();
        let _ = write!(out, "{}", side_by_side(&recorded, &replayed));
    }
    if let Some(w) = &r.what_if {
        let _ = writeln!(out, "what-if with policy {}:", w.policy);
        let _ = writeln!(
            out,
            "  commands added: {}, removed: {}",
            w.commands.added, w.commands.removed
        );
        for example in &w.commands.examples {
            let _ = writeln!(out, "    {example}");
        }
        let _ = writeln!(
            out,
            "  failures added: {}, removed: {}",
            w.failures_added, w.failures_removed
        );
        let _ = writeln!(
            out,
            "  accumulated WAF (planner's model): {:.4e} recorded, {:.4e} what-if ({:+.1}%)",
            w.waf_recorded,
            w.waf_what_if,
            w.waf_change_fraction * 100.0
        );
    }
    out
}

/// Two JSON texts in columns, differing lines marked with `|`.
fn side_by_side(left: &str, right: &str) -> String {
    use std::fmt::Write;
    let (l, r): (Vec<&str>, Vec<&str>) = (left.lines().collect(), right.lines().collect());
    let width = l
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, 60);
    let mut out = String::new();
    let _ = writeln!(out, "  {:<width$}   replayed", "recorded");
    for i in 0..l.len().max(r.len()) {
        let (a, b) = (
            l.get(i).copied().unwrap_or(""),
            r.get(i).copied().unwrap_or(""),
        );
        let mark = if a == b { ' ' } else { '|' };
        let a: String = a.chars().take(width).collect();
        let _ = writeln!(out, "  {a:<width$} {mark} {b}");
    }
    out
}

/// A bar over the replay's phases on a terminal (stderr); silent otherwise.
struct Progress {
    bar: indicatif::ProgressBar,
}

impl Progress {
    fn new(phases: u64) -> Progress {
        let bar = indicatif::ProgressBar::new(phases);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Progress { bar }
    }

    /// Starts the next phase.
    fn say(&self, phase: &str) {
        self.bar.inc(1);
        self.bar.set_message(phase.to_string());
    }

    fn done(&self) {
        self.bar.finish_and_clear();
    }
}
