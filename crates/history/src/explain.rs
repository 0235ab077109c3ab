//! The causal chain of one command, from the source records through the
//! failure and the decision to the results; from a loaded [`History`] or
//! from the status page's [`crate::ExplainIndex`], which answer alike.

use serde::Serialize;
use unicron_core::{Command, CommandResult, Decision, Evidence, FailureEvent};

use crate::history::{History, Recorded};
use crate::names::TopicNames;

/// One source record an evidence entry points at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvidenceSource {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The record as found, or `None` if retention or the archive no longer has it.
    pub record: Option<serde_json::Value>,
    pub excerpt: String,
}

/// The chain, newest link last.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Chain {
    pub sources: Vec<EvidenceSource>,
    pub failure: Option<FailureEvent>,
    /// The trigger when it is not a failure (a cluster event or a result).
    pub trigger: Option<serde_json::Value>,
    pub decision: Option<Decision>,
    pub command: Command,
    pub results: Vec<CommandResult>,
}

/// Where a chain's links are looked up. Where several records share an id,
/// the first in (partition, offset) order counts.
pub(crate) trait Links {
    type Error;
    fn names(&self) -> &TopicNames;
    fn command(&self, id: &str) -> Result<Option<Command>, Self::Error>;
    fn decision(&self, id: &str) -> Result<Option<Decision>, Self::Error>;
    fn failure(&self, at: &At<'_>) -> Result<Option<FailureEvent>, Self::Error>;
    /// A cluster event or a result, as JSON.
    fn trigger(&self, at: &At<'_>) -> Result<Option<serde_json::Value>, Self::Error>;
    /// A telemetry batch, log record or agent event, as JSON.
    fn source(&self, at: &At<'_>) -> Result<Option<serde_json::Value>, Self::Error>;
    /// The command's results in log order.
    fn results(&self, command_id: &str) -> Result<Vec<CommandResult>, Self::Error>;
}

/// A place in the log.
pub(crate) struct At<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

/// Assembles the chain of `command_id` from `links`, or `None` if the
/// command is unknown.
pub(crate) fn assemble<L: Links>(links: &L, command_id: &str) -> Result<Option<Chain>, L::Error> {
    let Some(command) = links.command(command_id)? else {
        return Ok(None);
    };
    let decision = links.decision(&command.decision_id)?;
    let (mut failure, mut trigger) = (None, None);
    if let Some(d) = &decision {
        let t = &d.trigger;
        let n = links.names();
        let at = At {
            topic: &t.topic,
            partition: t.partition,
            offset: t.offset,
        };
        if t.topic == n.failures {
            failure = links.failure(&at)?;
        } else if t.topic == n.cluster || t.topic == n.results {
            trigger = links.trigger(&at)?;
        }
    }
    let mut sources = Vec::new();
    for e in failure.iter().flat_map(|f| f.evidence.iter()) {
        sources.push(source(links, e)?);
    }
    let mut results = links.results(command_id)?;
    results.dedup();
    Ok(Some(Chain {
        sources,
        failure,
        trigger,
        decision,
        command,
        results,
    }))
}

fn source<L: Links>(links: &L, e: &Evidence) -> Result<EvidenceSource, L::Error> {
    let n = links.names();
    let at = At {
        topic: &e.topic,
        partition: e.partition,
        offset: e.offset,
    };
    let record = if e.topic == n.logs || e.topic == n.telemetry || e.topic == n.agent {
        links.source(&at)?
    } else {
        None
    };
    Ok(EvidenceSource {
        topic: e.topic.clone(),
        partition: e.partition,
        offset: e.offset,
        record,
        excerpt: e.excerpt.clone(),
    })
}

/// Assembles the chain of `command_id`, or `None` if the command is unknown.
pub fn chain(history: &History, command_id: &str) -> Option<Chain> {
    match assemble(history, command_id) {
        Ok(chain) => chain,
        Err(never) => match never {},
    }
}

fn find<'a, T>(list: &'a [Recorded<T>], at: &At<'_>) -> Option<&'a T> {
    list.iter()
        .find(|r| r.topic == at.topic && r.partition == at.partition && r.offset == at.offset)
        .map(|r| &r.record)
}

impl Links for History {
    type Error = std::convert::Infallible;

    fn names(&self) -> &TopicNames {
        &self.names
    }

    fn command(&self, id: &str) -> Result<Option<Command>, Self::Error> {
        Ok(self
            .commands
            .iter()
            .find(|c| c.record.id == id)
            .map(|c| c.record.clone()))
    }

    fn decision(&self, id: &str) -> Result<Option<Decision>, Self::Error> {
        Ok(self
            .decisions
            .iter()
            .find(|d| d.record.id == id)
            .map(|d| d.record.clone()))
    }

    fn failure(&self, at: &At<'_>) -> Result<Option<FailureEvent>, Self::Error> {
        Ok(find(&self.failures, at).cloned())
    }

    fn trigger(&self, at: &At<'_>) -> Result<Option<serde_json::Value>, Self::Error> {
        let n = &self.names;
        let value = if at.topic == n.cluster {
            find(&self.cluster, at).map(serde_json::to_value)
        } else if at.topic == n.results {
            find(&self.results, at).map(serde_json::to_value)
        } else {
            None
        };
        Ok(value.and_then(Result::ok))
    }

    fn source(&self, at: &At<'_>) -> Result<Option<serde_json::Value>, Self::Error> {
        let n = &self.names;
        let value = if at.topic == n.logs {
            find(&self.logs, at).map(serde_json::to_value)
        } else if at.topic == n.telemetry {
            find(&self.telemetry, at).map(serde_json::to_value)
        } else if at.topic == n.agent {
            find(&self.agent, at).map(serde_json::to_value)
        } else {
            None
        };
        Ok(value.and_then(Result::ok))
    }

    fn results(&self, command_id: &str) -> Result<Vec<CommandResult>, Self::Error> {
        Ok(self
            .results
            .iter()
            .filter(|r| r.record.command_id == command_id)
            .map(|r| r.record.clone())
            .collect())
    }
}
