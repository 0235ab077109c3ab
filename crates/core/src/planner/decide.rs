//! From a planned input to the decision and its commands: ids, the
//! restart budget, rendezvous and restore points, signatures, and the
//! in-flight table.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use super::cluster_events::on_cluster_event;
use super::failures::on_failure;
use super::results::on_result;
use super::{
    Action, ClusterState, InFlight, Input, InputEvent, Output, POLICY_VERSION, Plan, Planned,
    Planner, interval, policy, replan, snapshots, state,
};
use crate::records::{
    ClusterEventKind, Command, CommandAction, Decision, Rendezvous, SnapshotPlan, Trigger,
};

impl Planner {
    /// Applies one input. Returns the decision first, then its commands;
    /// or a single `Rejected`.
    pub fn apply(&mut self, input: &Input) -> Vec<Output> {
        let cluster = input.event.cluster().to_string();
        if cluster.is_empty() {
            return vec![Output::Rejected("record names no cluster".into())];
        }
        let state = self
            .clusters
            .entry(cluster.clone())
            .or_insert_with(|| ClusterState::new(&cluster));
        if let InputEvent::Failure(f) = &input.event
            && state.applied_failures.contains(&f.id)
        {
            return Vec::new(); // a re-delivered failure: already acted on
        }
        if let InputEvent::Cluster(e) = &input.event
            && e.kind == ClusterEventKind::JobFinished
            && e.job_id
                .as_ref()
                .is_some_and(|j| !state.jobs.contains_key(j))
        {
            // A scheduler's job unicron does not plan, or one already
            // finished (its agent and the scheduler both say so).
            return Vec::new();
        }
        // A rejected input leaves the state as it was. Failures and results
        // are rejected only before they change anything, so only the
        // watermark is kept for them; a cluster event is validated as it is
        // applied and keeps a whole copy (they are rare; failures and
        // results are most inputs, and a copy is as large as the cluster).
        let before = matches!(input.event, InputEvent::Cluster(_)).then(|| state.clone());
        let watermark = state.watermark_ms;
        let digest = if self.digests {
            inputs_digest(state, input)
        } else {
            String::new()
        };
        state.watermark_ms = state.watermark_ms.max(input.event.time_ms());
        let policy = policy::policy(self.config.policy);
        let step = match &input.event {
            InputEvent::Failure(f) => on_failure(&self.config, policy, state, f),
            InputEvent::Cluster(c) => on_cluster_event(&self.config, policy, state, c),
            InputEvent::Result(r) => on_result(&self.config, policy, state, r),
        };
        let Planned {
            trigger_kind,
            ref_id,
            mut plan,
            failure_id,
        } = match step {
            Ok(step) => step,
            Err(reason) => {
                match before {
                    Some(before) => *state = before,
                    None => state.watermark_ms = watermark,
                }
                return vec![Output::Rejected(reason)];
            }
        };
        if let InputEvent::Failure(f) = &input.event {
            state.applied_failures.push_back(f.id.clone());
            if state.applied_failures.len() > state::APPLIED_FAILURES {
                state.applied_failures.pop_front();
            }
        }
        let decision_id = format!(
            "d:{cluster}:{}:{}:{}",
            input.topic, input.partition, input.offset
        );
        let time_ms = input.event.time_ms();
        if let Some(reason) = budget_spent(state, &plan, failure_id.is_some()) {
            plan = policy::with_snapshot(&self.config, state, Vec::new(), reason);
        }
        // What moving each agent-launched job it starts costs, as priced.
        let started: BTreeSet<&str> = plan
            .actions
            .iter()
            .filter(|a| starts_workers(a.action))
            .filter_map(|a| a.job.as_deref())
            .collect();
        let estimates: Vec<String> = started
            .into_iter()
            .filter_map(|id| {
                let job = state.jobs.get(id).filter(|j| j.launch.is_some())?;
                let (seconds, source) = replan::job_transition_s(&self.config, state, job);
                Some(format!("{id} {seconds:.1} s ({source})"))
            })
            .collect();
        if !estimates.is_empty() {
            plan.reason = format!(
                "{}; transition estimates: {}",
                plan.reason,
                estimates.join(", ")
            );
        }
        let mut commands = Vec::with_capacity(plan.actions.len());
        let mut restore_points = Vec::new();
        let mut restarted = BTreeSet::new();
        for (index, action) in plan.actions.iter().enumerate() {
            let (nodes, rendezvous, snapshots) = rendezvous(&self.config, state, action);
            if let (Some(plan), Some(job)) = (&snapshots, &action.job) {
                restore_points.push(format!(
                    "{job} resumes from {}; snapshots {}",
                    plan.reason, plan.interval_reason
                ));
            }
            if rendezvous.is_some()
                && failure_id.is_some()
                && let Some(job) = &action.job
                && restarted.insert(job.clone())
                && let Some(j) = state.jobs.get_mut(job)
            {
                j.restarts += 1;
            }
            let awaiting = if rendezvous.is_some() && starts_workers(action.action) {
                nodes.iter().cloned().collect()
            } else {
                BTreeSet::new()
            };
            let command_id = format!(
                "c:{cluster}:{}:{}:{}:{index}",
                input.topic, input.partition, input.offset
            );
            // Restores after a failure are what a transition costs; a
            // job's first start or a re-plan on a new node is not one.
            if rendezvous.is_some()
                && failure_id.is_some()
                && let Some(j) = action.job.as_ref().and_then(|job| state.jobs.get_mut(job))
            {
                j.failure_starts.push_back(command_id.clone());
                if j.failure_starts.len() > state::FAILURE_STARTS {
                    j.failure_starts.pop_front();
                }
            }
            let mut command = Command {
                id: command_id,
                cluster: cluster.clone(),
                decision_id: decision_id.clone(),
                time_ms,
                action: action.action,
                job: action.job.clone().or_else(|| action.leaves.clone()),
                nodes,
                restore_from: action.restore_from.clone(),
                causation: failure_id
                    .iter()
                    .cloned()
                    .chain([format!(
                        "{}/{}/{}",
                        input.topic, input.partition, input.offset
                    )])
                    .collect(),
                key_id: String::new(),
                signature: Vec::new(),
                rendezvous,
                snapshots,
            };
            self.signer.sign(&mut command);
            state.in_flight.insert(
                command.id.clone(),
                InFlight {
                    action: action.action,
                    job: action.job.clone(),
                    node: action.node.clone(),
                    severity: action.severity,
                    failure_id: failure_id.clone(),
                    issued_ms: time_ms,
                    awaiting,
                },
            );
            commands.push(command);
        }
        if !restore_points.is_empty() {
            plan.reason = format!("{}; {}", plan.reason, restore_points.join("; "));
        }
        let decision = Decision {
            id: decision_id,
            cluster: cluster.clone(),
            time_ms,
            trigger: Trigger {
                kind: trigger_kind.to_string(),
                ref_id,
                topic: input.topic.clone(),
                partition: input.partition,
                offset: input.offset,
            },
            inputs_digest: digest,
            policy: self.config.policy.as_str().to_string(),
            policy_version: POLICY_VERSION.to_string(),
            alternatives: plan.alternatives,
            chosen_index: plan.chosen_index,
            assignment: plan.assignment,
            reason: plan.reason,
            command_ids: commands.iter().map(|c| c.id.clone()).collect(),
        };
        let mut outputs = Vec::with_capacity(1 + commands.len());
        outputs.push(Output::Decision(decision));
        outputs.extend(commands.into_iter().map(Output::Command));
        outputs
    }
}

/// Actions that start a job's workers; for agent-launched jobs they carry a
/// rendezvous.
fn starts_workers(action: CommandAction) -> bool {
    matches!(
        action,
        CommandAction::Reattempt
            | CommandAction::Restart
            | CommandAction::Reconfigure
            | CommandAction::Resume
    )
}

/// The node list, rendezvous and restore point of a command for `action`.
/// A start of an agent-launched job names every node of the job in rank
/// order (restart and reattempt keep its current nodes), bumps the job's
/// generation and picks the step its ranks resume from; anything else keeps
/// the action's nodes and carries neither. The start also sets how often
/// the workers snapshot (`interval`).
fn rendezvous(
    config: &super::PlannerConfig,
    state: &mut ClusterState,
    action: &Action,
) -> (Vec<String>, Option<Rendezvous>, Option<SnapshotPlan>) {
    let plain = (action.nodes.clone(), None, None);
    if action.action == CommandAction::CheckNode && action.nodes.len() > 1 {
        // The pair's all-reduce meets at the checked node.
        let first = &action.nodes[0];
        let master_addr = state
            .nodes
            .get(first)
            .and_then(|n| n.address.clone())
            .unwrap_or_else(|| first.clone());
        let rendezvous = Rendezvous {
            generation: 0,
            master_addr,
            master_port: i32::from(config.preflight_port),
        };
        return (action.nodes.clone(), Some(rendezvous), None);
    }
    if !starts_workers(action.action) {
        return plain;
    }
    let Some(job) = action.job.as_deref().and_then(|j| state.jobs.get(j)) else {
        return plain;
    };
    let Some(launch) = job.launch else {
        return plain;
    };
    let nodes = if action.nodes.is_empty() {
        job.nodes.clone()
    } else {
        action.nodes.clone()
    };
    let Some(first) = nodes.first() else {
        return plain;
    };
    let master_addr = state
        .nodes
        .get(first)
        .and_then(|n| n.address.clone())
        .unwrap_or_else(|| first.clone());
    let id = action.job.as_deref().expect("looked up above");
    let interval = interval::choose(config, state, id);
    let mut plan = snapshots::plan(state, id, &nodes);
    plan.interval_steps = interval.steps;
    plan.interval_reason = interval.reason;
    let job = state.jobs.get_mut(id).expect("looked up above");
    job.generation += 1;
    let port = i64::from(launch.master_port_base) + job.generation % 1000;
    let rendezvous = Rendezvous {
        generation: job.generation,
        master_addr,
        master_port: i32::try_from(port).unwrap_or(i32::MAX),
    };
    (nodes, Some(rendezvous), Some(plan))
}

/// Why a failure's plan may not restart an agent-launched job: its restart
/// budget is spent. Counted per job, whichever nodes it runs on.
fn budget_spent(state: &ClusterState, plan: &Plan, after_failure: bool) -> Option<String> {
    if !after_failure {
        return None;
    }
    plan.actions
        .iter()
        .filter(|a| starts_workers(a.action))
        .filter_map(|a| Some((a.job.as_deref()?, state.jobs.get(a.job.as_deref()?)?)))
        .find_map(|(id, job)| {
            let budget = job.launch?.restart_budget?;
            (job.restarts >= i64::from(budget)).then(|| {
                format!(
                    "job {id} has used its restart budget of {budget}; needs an operator (planned: {})",
                    plan.reason
                )
            })
        })
}

/// SHA-256 of the cluster state the decision is taken on and the input's
/// coordinates: two decisions with equal digests saw the same world.
fn inputs_digest(state: &ClusterState, input: &Input) -> String {
    let mut hasher = Sha256::new();
    // Streamed into the hash: the same bytes, no copy of the whole state.
    serde_json::to_writer(&mut hasher, state).expect("state serialises");
    hasher.update(format!(
        "{}/{}/{}",
        input.topic, input.partition, input.offset
    ));
    hex::encode(hasher.finalize())
}
