//! `unicron replay`: re-derive every failure, decision and command from the
//! recorded inputs and compare; or, with `--policy` / `--what-if-config`,
//! show what another policy or configuration would have done instead.

use std::path::PathBuf;

use anyhow::Context;
use unicron_core::planner::PolicyName;
use unicron_history::replay::{Options, Report, Setup, parse_policy};
use unicron_history::{History, TopicNames};

use crate::config::Config;
use crate::history::HistoryArgs;
use crate::usage::UsageError;

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
        .or_else(|_| unicron_codec::formats::time::rfc3339_ms(text))
        .map_err(|_| format!("`{text}` is neither RFC 3339 nor ms since the epoch"))
}

/// The tuning a run of `unicron up` decided with, in its run directory.
pub const RUN_TUNING: &str = "replay.toml";

/// `config`, or, when no `--config` was given and the archive holds the
/// tuning its run decided with, that: replay decides as the run did.
fn run_config(config: &Config, given: bool, args: &ReplayArgs) -> anyhow::Result<Config> {
    let recorded = args
        .history
        .from_archive
        .as_ref()
        .map(|dir| dir.join(RUN_TUNING))
        .filter(|path| path.is_file());
    match recorded {
        Some(path) if !given => {
            eprintln!("replay: with the run's tuning, {}", path.display());
            Config::load(Some(&path)).map_err(|e| UsageError(e.to_string()).into())
        }
        _ => Ok(config.clone()),
    }
}

pub fn run(config: &Config, config_given: bool, args: ReplayArgs) -> anyhow::Result<()> {
    let config = &run_config(config, config_given, &args)?;
    let names = TopicNames::new(&config.kafka).with_inputs(&config.detector.inputs);
    let origin = args.history.origin(&config.kafka)?;
    let what_if_config = match &args.what_if_config {
        Some(path) => Some(Config::load(Some(path)).map_err(|e| UsageError(e.to_string()))?),
        None => None,
    };
    // Eight topics and the external inputs to read, then decisions,
    // failures and the what-if.
    let progress = Progress::new(11 + config.detector.inputs.len() as u64);
    let history = History::load(&origin, names, &|topic| {
        progress.say(&format!("reading {topic}"))
    })?;
    let recorded = setup(config)?;
    let what_if = what_if_config.as_ref().map(setup).transpose()?;
    // The archive keeps no external input topic: failures found on one
    // cannot be re-derived from it, so they are not compared.
    let unreadable = if args.history.from_archive.is_some() {
        config
            .detector
            .inputs
            .iter()
            .map(|i| i.topic.clone())
            .collect()
    } else {
        Vec::new()
    };
    let options = Options {
        cluster: args.cluster.clone(),
        since: args.since,
        until: args.until,
        policy: args.policy,
        unreadable,
    };
    let report = unicron_history::replay::replay(recorded, &options, &history, what_if, &|phase| {
        progress.say(phase)
    });
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

fn setup(config: &Config) -> anyhow::Result<Setup> {
    Ok(Setup {
        planner: config.planner.tuning.clone(),
        detector: config.detector.tuning.clone(),
        rules: config.detector.rules()?,
    })
}

/// Replay found differences: exit code 1, after the report.
#[derive(Debug, thiserror::Error)]
#[error("{0} divergence(s)")]
pub struct Diverged(pub u64);

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
    if r.detector_rounds > 0 {
        let _ = writeln!(
            out,
            "detector: replayed exactly from {} rounds{}",
            r.detector_rounds,
            match r.detector_instances_incomplete {
                0 => String::new(),
                n => format!(" ({n} instances compared up to records no longer held)"),
            }
        );
    } else {
        let _ = writeln!(
            out,
            "detector: no rounds in this log (written before them); failures re-derived in event-time order and compared by what was found"
        );
    }
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
