//! The run's outcome from ground truth (the simulator's summary) and the
//! log (commands and their results).

use std::collections::{BTreeMap, BTreeSet};

use unicron_bus::whole_topic::read_topic;
use unicron_codec::{AvroCodec, KafkaConfig, Topic, Topics};
use unicron_core::{Command, CommandResult, CommandStatus};

/// What the summary line reports.
#[derive(Debug, Default)]
pub struct Verdict {
    pub failures: u64,
    pub actions: u64,
    pub duplicates_suppressed: u64,
    pub duplicate_actions: u64,
    pub lost: u64,
    /// Why each duplicate or lost item counts, for the report.
    pub findings: Vec<String>,
}

/// Reads commands and results from the log and the simulator's summary.
pub fn judge(
    kafka: &KafkaConfig,
    brokers: &str,
    summary: &serde_json::Value,
) -> anyhow::Result<Verdict> {
    let mut v = Verdict::default();
    // Ground truth: every fault the simulator injected into a running job
    // must have been resolved by an action.
    for fault in summary["faults"].as_array().into_iter().flatten() {
        v.failures += 1;
        if fault["resolved_ms"].is_null() {
            v.lost += 1;
            v.findings.push(format!("fault not resolved: {fault}"));
        }
    }
    v.actions = summary["commands_executed"].as_u64().unwrap_or(0);
    v.duplicates_suppressed = summary["duplicate_requests"].as_u64().unwrap_or(0);

    let topics = Topics::new(kafka);
    let commands: BTreeMap<String, Command> =
        read_topic(kafka, brokers, topics.name(Topic::Commands))?
            .iter()
            .filter_map(|r| AvroCodec::<Command>::default().decode(&r.payload).ok())
            .map(|c| (c.id.clone(), c))
            .collect();
    let mut finals: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for record in read_topic(kafka, brokers, topics.name(Topic::CommandResults))? {
        let Ok(result) = AvroCodec::<CommandResult>::default().decode(&record.payload) else {
            continue;
        };
        if matches!(
            result.status,
            CommandStatus::Succeeded | CommandStatus::Failed | CommandStatus::Rejected
        ) {
            finals
                .entry(result.command_id.clone())
                .or_default()
                .insert(format!("{:?}", result.status));
        }
    }
    // Every command has exactly one final result.
    for id in commands.keys() {
        match finals.get(id).map_or(0, BTreeSet::len) {
            0 => {
                v.lost += 1;
                v.findings.push(format!("command {id} has no final result"));
            }
            1 => {}
            _ => {
                v.duplicate_actions += 1;
                v.findings
                    .push(format!("command {id} has results {:?}", finals[id]));
            }
        }
    }
    // No failure gets the same action on the same target twice under two ids.
    let mut by_target: BTreeMap<(String, String, String, String), Vec<&str>> = BTreeMap::new();
    for c in commands.values() {
        let Some(cause) = c.causation.first().filter(|c| c.starts_with("f:")) else {
            continue;
        };
        by_target
            .entry((
                cause.clone(),
                c.action.symbol().to_string(),
                c.job.clone().unwrap_or_default(),
                c.nodes.join(","),
            ))
            .or_default()
            .push(&c.id);
    }
    for (target, ids) in by_target {
        if ids.len() > 1 {
            v.duplicate_actions += ids.len() as u64 - 1;
            v.findings
                .push(format!("{target:?} commanded {} times: {ids:?}", ids.len()));
        }
    }
    Ok(v)
}
