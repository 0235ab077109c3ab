//! `unicron explain COMMAND_ID`: the causal chain of one command, from the
//! source records through the failure and the decision to the results.

use serde::Serialize;
use unicron_core::{Command, CommandResult, Decision, Evidence, FailureEvent};

use crate::cli::UsageError;
use crate::config::Config;
use crate::history::{History, HistoryArgs, Needs, Recorded, TopicNames};

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The command's id, e.g. c:sim:unicron.failures:0:12:0.
    #[arg(required_unless_present = "list")]
    pub command_id: Option<String>,
    /// List every command in the history (id, time, action, job, nodes) instead.
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub history: HistoryArgs,
    /// Print the chain as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One source record an evidence entry points at.
#[derive(Debug, Serialize)]
pub struct Source {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The record as found, or `None` if retention or the archive no longer has it.
    pub record: Option<serde_json::Value>,
    pub excerpt: String,
}

/// The chain, newest link last.
#[derive(Debug, Serialize)]
pub struct Chain {
    pub sources: Vec<Source>,
    pub failure: Option<FailureEvent>,
    /// The trigger when it is not a failure (a cluster event or a result).
    pub trigger: Option<serde_json::Value>,
    pub decision: Option<Decision>,
    pub command: Command,
    pub results: Vec<CommandResult>,
}

pub fn run(config: &Config, args: ExplainArgs) -> anyhow::Result<()> {
    let names = TopicNames::new(&config.kafka);
    let origin = args.history.origin(&config.kafka)?;
    let history = History::load(
        &origin,
        names,
        Needs {
            detector_inputs: true,
        },
        &|_| {},
    )?;
    let Some(command_id) = args.command_id.as_deref().filter(|_| !args.list) else {
        let mut seen = std::collections::BTreeSet::new();
        for c in &history.commands {
            let c = &c.record;
            if seen.insert(c.id.as_str()) {
                println!(
                    "{} {} {} {} [{}]",
                    c.id,
                    c.time_ms,
                    c.action.symbol(),
                    c.job.as_deref().unwrap_or("-"),
                    c.nodes.join(",")
                );
            }
        }
        return Ok(());
    };
    let chain = chain(&history, command_id)
        .ok_or_else(|| UsageError(format!("no command `{command_id}` in the history")))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&chain)?);
    } else {
        print!("{}", text(&chain));
    }
    Ok(())
}

fn find<'a, T>(list: &'a [Recorded<T>], topic: &str, partition: i32, offset: i64) -> Option<&'a T> {
    list.iter()
        .find(|r| r.topic == topic && r.partition == partition && r.offset == offset)
        .map(|r| &r.record)
}

fn source(history: &History, e: &Evidence) -> Source {
    let n = &history.names;
    let (topic, partition, offset) = (e.topic.as_str(), e.partition, e.offset);
    let record = if topic == n.logs {
        find(&history.logs, topic, partition, offset).map(serde_json::to_value)
    } else if topic == n.telemetry {
        find(&history.telemetry, topic, partition, offset).map(serde_json::to_value)
    } else if topic == n.agent {
        find(&history.agent, topic, partition, offset).map(serde_json::to_value)
    } else {
        None
    };
    Source {
        topic: e.topic.clone(),
        partition,
        offset,
        record: record.and_then(Result::ok),
        excerpt: e.excerpt.clone(),
    }
}

/// Assembles the chain of `command_id`, or `None` if the command is unknown.
pub fn chain(history: &History, command_id: &str) -> Option<Chain> {
    let command = history
        .commands
        .iter()
        .find(|c| c.record.id == command_id)?
        .record
        .clone();
    let decision = history
        .decisions
        .iter()
        .find(|d| d.record.id == command.decision_id)
        .map(|d| d.record.clone());
    let (mut failure, mut trigger) = (None, None);
    if let Some(d) = &decision {
        let t = &d.trigger;
        let n = &history.names;
        if t.topic == n.failures {
            failure = find(&history.failures, &t.topic, t.partition, t.offset).cloned();
        } else if t.topic == n.cluster {
            trigger = find(&history.cluster, &t.topic, t.partition, t.offset)
                .and_then(|r| serde_json::to_value(r).ok());
        } else if t.topic == n.results {
            trigger = find(&history.results, &t.topic, t.partition, t.offset)
                .and_then(|r| serde_json::to_value(r).ok());
        }
    }
    let sources = failure
        .iter()
        .flat_map(|f| f.evidence.iter())
        .map(|e| source(history, e))
        .collect();
    let mut results: Vec<CommandResult> = history
        .results
        .iter()
        .filter(|r| r.record.command_id == command_id)
        .map(|r| r.record.clone())
        .collect();
    results.dedup();
    Some(Chain {
        sources,
        failure,
        trigger,
        decision,
        command,
        results,
    })
}

/// The chain as `unicron explain` prints it.
pub fn text(c: &Chain) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "evidence:");
    if c.sources.is_empty() {
        let _ = writeln!(out, "  (none: the trigger is not a failure)");
    }
    for s in &c.sources {
        let found = if s.record.is_some() {
            ""
        } else {
            " (no longer in the history)"
        };
        let _ = writeln!(
            out,
            "  {}/{}/{}{found}: {}",
            s.topic, s.partition, s.offset, s.excerpt
        );
    }
    match (&c.failure, &c.trigger) {
        (Some(f), _) => {
            let _ = writeln!(
                out,
                "failure {}: {} {} on {} (job {}), by {:?}{}, first evidence {} ms, detected {} ms",
                f.id,
                f.severity,
                f.kind,
                f.node.as_deref().unwrap_or("-"),
                f.job.as_deref().unwrap_or("-"),
                f.method,
                f.rule
                    .as_deref()
                    .map(|r| format!(" rule {r}"))
                    .unwrap_or_default(),
                f.first_evidence_ms,
                f.detected_ms
            );
        }
        (None, Some(t)) => {
            let _ = writeln!(out, "trigger: {t}");
        }
        (None, None) => {
            let _ = writeln!(out, "trigger: not in the history");
        }
    }
    match &c.decision {
        Some(d) => {
            let _ = writeln!(
                out,
                "decision {} at {} ms ({} policy v{}): {}",
                d.id, d.time_ms, d.policy, d.policy_version, d.reason
            );
            for (i, a) in d.alternatives.iter().enumerate() {
                let chosen = if d.chosen_index == Some(i as i32) {
                    "*"
                } else {
                    " "
                };
                let alloc: Vec<String> = a
                    .allocation
                    .iter()
                    .map(|(j, g)| format!("{j}={g}"))
                    .collect();
                let _ = writeln!(
                    out,
                    "  {chosen} alternative {i}: WAF {:.4e}, objective {:.4e}: {}",
                    a.waf,
                    a.objective,
                    alloc.join(" ")
                );
            }
        }
        None => {
            let _ = writeln!(
                out,
                "decision {}: not in the history",
                c.command.decision_id
            );
        }
    }
    let cmd = &c.command;
    let _ = writeln!(
        out,
        "command {}: {} job {} nodes [{}]{}, signed by {}",
        cmd.id,
        cmd.action.symbol(),
        cmd.job.as_deref().unwrap_or("-"),
        cmd.nodes.join(","),
        cmd.restore_from
            .as_deref()
            .map(|r| format!(" from {r}"))
            .unwrap_or_default(),
        cmd.key_id
    );
    if c.results.is_empty() {
        let _ = writeln!(out, "results: none yet");
    }
    for r in &c.results {
        let _ = writeln!(
            out,
            "result: {:?} by {} at {} ms after {} ms{}",
            r.status,
            r.executor,
            r.time_ms,
            r.duration_ms,
            r.reason
                .as_deref()
                .map(|x| format!(": {x}"))
                .unwrap_or_default()
        );
    }
    out
}
