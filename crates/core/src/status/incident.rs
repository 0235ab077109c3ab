//! One incident: a failure and the chain of decisions, commands and
//! results it caused, with the state and recovery time derived from them.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::records::{
    Command, CommandAction, CommandResult, CommandStatus, Decision, FailureEvent,
};

/// Decisions, commands, and results per command, one incident keeps; more
/// are counted, not stored (an escalation loop must not grow one row).
pub const CHAIN: usize = 64;

/// Where an incident stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentState {
    /// Not decided yet, or a command has no final result.
    Open,
    /// Every command the last decisions issued succeeded.
    Recovered,
    /// A command failed or was rejected and nothing harsher followed.
    NeedsOperator,
    /// Decided, with no command (e.g. the node was already out of service).
    NoAction,
}

impl IncidentState {
    pub fn symbol(self) -> &'static str {
        match self {
            IncidentState::Open => "open",
            IncidentState::Recovered => "recovered",
            IncidentState::NeedsOperator => "needs_operator",
            IncidentState::NoAction => "no_action",
        }
    }

    /// Open or waiting for an operator: what the on-call still owns.
    pub fn unresolved(self) -> bool {
        matches!(self, IncidentState::Open | IncidentState::NeedsOperator)
    }
}

/// A decision in an incident's chain, without its alternatives (the
/// explain view of its commands has them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainDecision {
    pub id: String,
    pub time_ms: i64,
    /// `failure` or `command_result`.
    pub trigger_kind: String,
    /// The failure or command id the decision was taken on.
    pub trigger_id: String,
    pub policy: String,
    pub reason: String,
    pub alternatives: usize,
    pub command_ids: Vec<String>,
    /// False for decisions that issue no command: the page folds them.
    pub changes: bool,
}

/// What a command's results add up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandOutcome {
    Pending,
    Succeeded,
    Failed,
    Rejected,
}

/// One executor result of a chain's command.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainResult {
    pub time_ms: i64,
    pub status: CommandStatus,
    pub reason: Option<String>,
    pub duration_ms: i64,
    pub executor: String,
    pub node: Option<String>,
}

/// A command in an incident's chain, with its results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainCommand {
    pub id: String,
    pub decision_id: String,
    pub time_ms: i64,
    pub action: CommandAction,
    pub job: Option<String>,
    pub nodes: Vec<String>,
    pub outcome: CommandOutcome,
    /// Time of the result that made the outcome final.
    pub done_ms: Option<i64>,
    pub results: Vec<ChainResult>,
    /// Results past [`CHAIN`], counted only.
    pub more_results: usize,
    /// Start commands of agent-launched jobs finish when every node named
    /// has succeeded, as the planner counts them.
    #[serde(skip)]
    awaiting: BTreeSet<String>,
}

/// One failure and everything the control plane did about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Incident {
    /// The failure's id.
    pub id: String,
    pub cluster: String,
    pub kind: String,
    pub severity: String,
    pub node: Option<String>,
    pub job: Option<String>,
    pub first_evidence_ms: i64,
    pub detected_ms: i64,
    /// How it was found (`log_rule`, `metric_rule`, `heartbeat`, ...) and
    /// the rule that found it, when one did.
    pub method: String,
    pub rule: Option<String>,
    /// What the rule read: the first evidence's excerpt and its topic.
    pub evidence: Option<String>,
    pub evidence_topic: Option<String>,
    pub state: IncidentState,
    /// Distinct actions commanded, in order ("isolate_node, reconfigure");
    /// "no command" once decided without one; empty before any decision.
    pub decided: String,
    /// Decisions in event-time order, including those that change nothing.
    pub decisions: Vec<ChainDecision>,
    pub commands: Vec<ChainCommand>,
    /// Decisions and commands past [`CHAIN`], counted only.
    pub more: usize,
    /// When the last command that completed the recovery succeeded.
    pub recovered_ms: Option<i64>,
    /// From the first evidence (the detection time when the failure has
    /// none) to `recovered_ms`; `None` unless recovered.
    pub time_to_recovery_ms: Option<i64>,
}

impl Incident {
    pub(super) fn new(f: &FailureEvent) -> Incident {
        let mut incident = Incident {
            id: f.id.clone(),
            cluster: f.cluster.clone(),
            kind: f.kind.symbol().to_string(),
            severity: f.severity.symbol().to_string(),
            node: f.node.clone(),
            job: f.job.clone(),
            first_evidence_ms: f.first_evidence_ms,
            detected_ms: f.detected_ms,
            method: f.method.symbol().to_string(),
            rule: f.rule.clone(),
            evidence: f.evidence.first().map(|e| e.excerpt.clone()),
            evidence_topic: f.evidence.first().map(|e| e.topic.clone()),
            state: IncidentState::Open,
            decided: String::new(),
            decisions: Vec::new(),
            commands: Vec::new(),
            more: 0,
            recovered_ms: None,
            time_to_recovery_ms: None,
        };
        incident.refresh();
        incident
    }

    /// Decisions that issued no command, folded into the chain.
    pub fn folded(&self) -> usize {
        self.decisions.iter().filter(|d| !d.changes).count()
    }

    /// Where recovery time is counted from.
    fn start_ms(&self) -> i64 {
        if self.first_evidence_ms > 0 && self.first_evidence_ms <= self.detected_ms {
            self.first_evidence_ms
        } else {
            self.detected_ms
        }
    }

    pub(super) fn add_decision(&mut self, d: ChainDecision) {
        if self.decisions.iter().any(|x| x.id == d.id) {
            return;
        }
        if self.decisions.len() >= CHAIN {
            self.more += 1;
            return;
        }
        // Arrival order is not event order; keep the chain readable.
        let at = self
            .decisions
            .partition_point(|x| (x.time_ms, &x.id) <= (d.time_ms, &d.id));
        self.decisions.insert(at, d);
        self.refresh();
    }

    /// Adds a command; false if it was already there or did not fit.
    pub(super) fn add_command(&mut self, c: ChainCommand) -> bool {
        if self.commands.iter().any(|x| x.id == c.id) {
            return false;
        }
        if self.commands.len() >= CHAIN {
            self.more += 1;
            return false;
        }
        let at = self
            .commands
            .partition_point(|x| (x.time_ms, &x.id) <= (c.time_ms, &c.id));
        self.commands.insert(at, c);
        self.refresh();
        true
    }

    pub(super) fn add_result(&mut self, r: &CommandResult) {
        let Some(c) = self.commands.iter_mut().find(|c| c.id == r.command_id) else {
            return;
        };
        if c.results.len() < CHAIN {
            c.results.push(ChainResult {
                time_ms: r.time_ms,
                status: r.status,
                reason: r.reason.clone(),
                duration_ms: r.duration_ms,
                executor: r.executor.clone(),
                node: r.node.clone(),
            });
        } else {
            c.more_results += 1;
        }
        // As the planner's in-flight table: the first final result counts.
        if c.outcome == CommandOutcome::Pending {
            match r.status {
                CommandStatus::Succeeded => {
                    let per_node = r.node.as_ref().filter(|_| !c.awaiting.is_empty());
                    if let Some(node) = per_node {
                        c.awaiting.remove(node);
                    }
                    if per_node.is_none() || c.awaiting.is_empty() {
                        c.outcome = CommandOutcome::Succeeded;
                        c.done_ms = Some(r.time_ms);
                    }
                }
                CommandStatus::Failed => {
                    c.outcome = CommandOutcome::Failed;
                    c.done_ms = Some(r.time_ms);
                }
                // A rejected unsigned or forged copy says nothing about
                // the real command (the planner ignores it too).
                CommandStatus::Rejected
                    if !r
                        .reason
                        .as_deref()
                        .is_some_and(|w| w.starts_with("unsigned") || w.starts_with("forged")) =>
                {
                    c.outcome = CommandOutcome::Rejected;
                    c.done_ms = Some(r.time_ms);
                }
                _ => {}
            }
        }
        self.refresh();
    }

    /// Re-derives state, summary and recovery time from the chain.
    fn refresh(&mut self) {
        let issued: BTreeSet<&str> = self
            .decisions
            .iter()
            .flat_map(|d| d.command_ids.iter().map(String::as_str))
            .collect();
        let missing = issued
            .iter()
            .any(|id| !self.commands.iter().any(|c| c.id == *id));
        let pending = self
            .commands
            .iter()
            .any(|c| c.outcome == CommandOutcome::Pending);
        // A failed command is answered when a decision on its result
        // issued a harsher one.
        let unanswered = self.commands.iter().any(|c| {
            matches!(c.outcome, CommandOutcome::Failed | CommandOutcome::Rejected)
                && !self
                    .decisions
                    .iter()
                    .any(|d| d.trigger_id == c.id && d.changes)
        });
        self.state = if self.decisions.is_empty() || missing || pending {
            IncidentState::Open
        } else if self.commands.is_empty() {
            IncidentState::NoAction
        } else if unanswered {
            IncidentState::NeedsOperator
        } else {
            IncidentState::Recovered
        };
        self.recovered_ms = (self.state == IncidentState::Recovered)
            .then(|| {
                self.commands
                    .iter()
                    .filter(|c| c.outcome == CommandOutcome::Succeeded)
                    .filter_map(|c| c.done_ms)
                    .max()
            })
            .flatten();
        self.time_to_recovery_ms = self.recovered_ms.map(|t| (t - self.start_ms()).max(0));
        let mut actions: Vec<&str> = Vec::new();
        for c in &self.commands {
            if !actions.contains(&c.action.symbol()) {
                actions.push(c.action.symbol());
            }
        }
        self.decided = if !actions.is_empty() {
            actions.join(", ")
        } else if self.decisions.is_empty() {
            String::new()
        } else {
            "no command".to_string()
        };
    }
}

/// A decision as an incident's chain shows it.
pub(super) fn chain_decision(d: &Decision) -> ChainDecision {
    ChainDecision {
        id: d.id.clone(),
        time_ms: d.time_ms,
        trigger_kind: d.trigger.kind.clone(),
        trigger_id: d.trigger.ref_id.clone(),
        policy: d.policy.clone(),
        reason: d.reason.clone(),
        alternatives: d.alternatives.len(),
        command_ids: d.command_ids.clone(),
        changes: !d.command_ids.is_empty(),
    }
}

/// A command as an incident's chain shows it, with no result yet.
pub(super) fn chain_command(c: &Command) -> ChainCommand {
    ChainCommand {
        id: c.id.clone(),
        decision_id: c.decision_id.clone(),
        time_ms: c.time_ms,
        action: c.action,
        job: c.job.clone(),
        nodes: c.nodes.clone(),
        outcome: CommandOutcome::Pending,
        done_ms: None,
        results: Vec::new(),
        more_results: 0,
        awaiting: if c.rendezvous.is_some() {
            c.nodes.iter().cloned().collect()
        } else {
            BTreeSet::new()
        },
    }
}
