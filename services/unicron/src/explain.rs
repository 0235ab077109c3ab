//! `unicron explain COMMAND_ID`: the causal chain of one command, from the
//! source records through the failure and the decision to the results.
//! `--incidents`: one line per failure, newest first, from the status
//! page's own model, so the two agree.

use unicron_core::planner::InputEvent;
use unicron_core::status::{INCIDENTS, Incident, IncidentLog, Record};
use unicron_history::{Chain, History, TopicNames};

use crate::config::Config;
use crate::history::HistoryArgs;
use crate::usage::UsageError;

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The command's id, e.g. c:sim:unicron.failures:0:12:0.
    #[arg(required_unless_present_any = ["list", "incidents"])]
    pub command_id: Option<String>,
    /// List every command in the history (id, time, action, job, nodes) instead.
    #[arg(long, conflicts_with = "incidents")]
    pub list: bool,
    /// List incidents instead, newest first: detected (ms), cluster, failure
    /// id, severity, kind, node/job, actions decided, state, time to
    /// recovery (the status page's newest incidents).
    #[arg(long)]
    pub incidents: bool,
    /// With --incidents: only this cluster's.
    #[arg(long, requires = "incidents")]
    pub cluster: Option<String>,
    #[command(flatten)]
    pub history: HistoryArgs,
    /// Print the chain as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(config: &Config, args: ExplainArgs) -> anyhow::Result<()> {
    let names = TopicNames::new(&config.kafka);
    let origin = args.history.origin(&config.kafka)?;
    let history = History::load(&origin, names, &|_| {})?;
    if args.incidents {
        for incident in incidents(&history, args.cluster.as_deref()) {
            println!("{}", incident_line(&incident));
        }
        return Ok(());
    }
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
    let chain = unicron_history::explain::chain(&history, command_id)
        .ok_or_else(|| UsageError(format!("no command `{command_id}` in the history")))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&chain)?);
    } else {
        print!("{}", text(&chain));
    }
    Ok(())
}

/// The history's incidents, as the status page derives them.
fn incidents(history: &History, cluster: Option<&str>) -> Vec<Incident> {
    let mut log = IncidentLog::new();
    // Any order will do: the model waits for what comes later.
    for f in &history.failures {
        log.apply(&Record::Input(InputEvent::Failure(f.record.clone())));
    }
    for d in &history.decisions {
        log.apply(&Record::Decision(d.record.clone()));
    }
    for c in &history.commands {
        log.apply(&Record::Command(c.record.clone()));
    }
    for r in &history.results {
        log.apply(&Record::Input(InputEvent::Result(r.record.clone())));
    }
    log.incidents(cluster, INCIDENTS)
}

/// One incident on one line, fields separated by single spaces.
pub fn incident_line(i: &Incident) -> String {
    let decided = match i.decided.as_str() {
        "" => "-".to_string(),
        "no command" => "none".to_string(),
        actions => actions.replace(", ", ","),
    };
    let recovery = i
        .time_to_recovery_ms
        .map_or_else(|| "-".to_string(), |ms| format!("{ms}ms"));
    format!(
        "{} {} {} {} {} {}/{} {decided} {} {recovery}",
        i.detected_ms,
        i.cluster,
        i.id,
        i.severity,
        i.kind,
        i.node.as_deref().unwrap_or("-"),
        i.job.as_deref().unwrap_or("-"),
        i.state.symbol(),
    )
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
