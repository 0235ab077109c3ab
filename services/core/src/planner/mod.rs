//! The planner as a pure state machine: `apply` one input record (a
//! failure, a cluster event or a command result), get the decision and
//! commands it leads to. Same inputs in the same order give byte-identical
//! outputs (docs/design.md §4): no clock, ordered maps, deterministic ids and
//! signatures.

mod config;
mod policy;
mod replan;
pub mod snapshots;
mod state;

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

pub use config::{DEFAULT_ISOLATION_SHARE, PlannerConfig, PolicyName};
pub use policy::{Hit, Policy, policy};
pub use replan::{Action, Plan};
pub use state::{
    ClusterState, Health, InFlight, Job, JobStatus, Node, Observed, RecentFault, RestoreCost,
};

use crate::allocation::Profile;
use crate::records::{
    ClusterEvent, ClusterEventKind, Command, CommandAction, CommandResult, CommandStatus, Decision,
    FailureEvent, JobSpec, Rendezvous, Severity, SnapshotPlan, Trigger,
};
use crate::signing::CommandSigner;

/// Version of the decision logic; bump it when the same inputs would lead
/// to different decisions, so replay can tell a bug from a policy change.
pub const POLICY_VERSION: &str = "2";

/// The trigger kind of decisions that only note an agent's snapshots: a
/// few a second per node, so views of recent decisions leave them out.
pub const SNAPSHOT_REPORT: &str = "snapshot_report";

/// The blast-radius window: isolations are counted over an hour.
const ISOLATION_WINDOW_MS: i64 = 3_600_000;

/// Failure times kept per node and per cluster.
const HISTORY: usize = 64;

/// One input record and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub event: InputEvent,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InputEvent {
    Failure(FailureEvent),
    Cluster(ClusterEvent),
    Result(CommandResult),
}

impl InputEvent {
    pub fn cluster(&self) -> &str {
        match self {
            InputEvent::Failure(f) => &f.cluster,
            InputEvent::Cluster(c) => &c.cluster,
            InputEvent::Result(r) => &r.cluster,
        }
    }

    pub fn time_ms(&self) -> i64 {
        match self {
            InputEvent::Failure(f) => f.detected_ms,
            InputEvent::Cluster(c) => c.time_ms,
            InputEvent::Result(r) => r.time_ms,
        }
    }
}

/// What one input leads to.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Decision(Decision),
    Command(Command),
    /// The input is impossible (e.g. a node event without a node): it goes
    /// to the dead-letter topic with this reason and changes nothing.
    Rejected(String),
}

/// The planner of every cluster it has seen.
#[derive(Debug)]
pub struct Planner {
    config: PlannerConfig,
    signer: CommandSigner,
    clusters: BTreeMap<String, ClusterState>,
    /// Decisions carry the digest of the state they were taken on.
    digests: bool,
}

impl Planner {
    pub fn new(config: PlannerConfig, signer: CommandSigner) -> Planner {
        Planner {
            config,
            signer,
            clusters: BTreeMap::new(),
            digests: true,
        }
    }

    /// A planner whose decisions leave `inputs_digest` empty: for the
    /// offline evaluation, which compares policies and never replays its
    /// decisions. Hashing the whole state is a third of a decision's cost
    /// at 10,240 GPUs. The decisions are otherwise the same.
    pub fn without_digests(mut self) -> Planner {
        self.digests = false;
        self
    }

    pub fn config(&self) -> &PlannerConfig {
        &self.config
    }

    pub fn cluster(&self, id: &str) -> Option<&ClusterState> {
        self.clusters.get(id)
    }

    pub fn clusters(&self) -> impl Iterator<Item = &ClusterState> {
        self.clusters.values()
    }

    /// Installs a cluster's state loaded from the store or a checkpoint,
    /// once it passes the checks a new job's spec passes; otherwise says
    /// what is wrong and installs nothing.
    pub fn restore(&mut self, state: ClusterState) -> Result<(), String> {
        state.validate()?;
        self.clusters.insert(state.id.clone(), state);
        Ok(())
    }

    /// Forgets a cluster (its partition moved to another instance).
    pub fn evict(&mut self, id: &str) -> Option<ClusterState> {
        self.clusters.remove(id)
    }

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
            let (nodes, rendezvous, snapshots) = rendezvous(state, action);
            if let (Some(plan), Some(job)) = (&snapshots, &action.job) {
                restore_points.push(format!("{job} resumes from {}", plan.reason));
            }
            if rendezvous.is_some()
                && failure_id.is_some()
                && let Some(job) = &action.job
                && restarted.insert(job.clone())
                && let Some(j) = state.jobs.get_mut(job)
            {
                j.restarts += 1;
            }
            let awaiting = if rendezvous.is_some() {
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
/// the action's nodes and carries neither.
fn rendezvous(
    state: &mut ClusterState,
    action: &Action,
) -> (Vec<String>, Option<Rendezvous>, Option<SnapshotPlan>) {
    let plain = (action.nodes.clone(), None, None);
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
    let plan = snapshots::plan(state, id, &nodes);
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

/// What an input leads to, before it becomes a decision and commands.
struct Planned {
    /// The decision's trigger kind.
    trigger_kind: &'static str,
    /// The decision's trigger ref id: the failure, job, node or command.
    ref_id: String,
    plan: Plan,
    /// The failure the commands are caused by, for their causation.
    failure_id: Option<String>,
}

/// A planned input, or why it is rejected.
type Step = Result<Planned, String>;

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

fn on_failure(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    f: &FailureEvent,
) -> Step {
    if f.job.is_none() && f.node.is_none() {
        return Err(format!("failure {} names neither node nor job", f.id));
    }
    let job = f
        .job
        .clone()
        .filter(|j| state.jobs.contains_key(j))
        .or_else(|| {
            f.node
                .as_deref()
                .and_then(|n| state.job_on(n))
                .map(str::to_string)
        });
    let base = match f.severity {
        Severity::Unknown => f.kind.default_severity(),
        s => s,
    };
    // Repeats of the same fault within the window escalate one level.
    let window_ms = (config.escalation_window_s * 1000.0) as i64;
    let now = f.first_evidence_ms;
    state
        .recent_faults
        .retain(|r| r.time_ms >= state.watermark_ms - window_ms);
    let key = (
        job.clone(),
        if job.is_none() { f.node.clone() } else { None },
    );
    let repeats = 1 + state
        .recent_faults
        .iter()
        .filter(|r| {
            r.kind == f.kind
                && (
                    r.job.clone(),
                    if r.job.is_none() {
                        r.node.clone()
                    } else {
                        None
                    },
                ) == key
        })
        .filter(|r| r.time_ms >= now - window_ms)
        .count();
    state.recent_faults.push(RecentFault {
        time_ms: now,
        job: job.clone(),
        node: f.node.clone(),
        kind: f.kind,
    });
    // The detector may already have escalated a node's repeated SEV3 faults;
    // escalating from the kind's default (not from `base`) keeps one repeat
    // from being escalated twice.
    let severity = if repeats >= config.escalation_repeats.max(1) && config.escalation_repeats > 1 {
        base.min(f.kind.default_severity().escalate())
    } else {
        base
    };
    if let Some(node) = f.node.as_deref() {
        let n = state.nodes.entry(node.to_string()).or_insert(Node {
            gpus: config.node_gpus,
            health: Health::Healthy,
            failures: Vec::new(),
            address: None,
            snapshot_address: None,
        });
        push_bounded(&mut n.failures, now);
        if n.health == Health::Healthy && severity != Severity::Sev1 {
            n.health = Health::Suspect;
        }
    }
    if job.is_some() {
        push_bounded(&mut state.failure_times, now);
    }
    let hit = Hit {
        job,
        node: f.node.clone(),
        kind: f.kind,
        severity,
    };
    let mut plan = plan_failure(config, policy, state, &hit);
    if severity != base {
        plan.reason = format!(
            "escalated from {base} after {repeats} repeats within {}s; {}",
            config.escalation_window_s, plan.reason
        );
    }
    Ok(Planned {
        trigger_kind: "failure",
        ref_id: f.id.clone(),
        plan,
        failure_id: Some(f.id.clone()),
    })
}

fn push_bounded(times: &mut Vec<i64>, time: i64) {
    times.push(time);
    if times.len() > HISTORY {
        times.remove(0);
    }
}

/// A job spec the planner can plan with, or the field that is wrong.
pub(crate) fn validate_spec(spec: &JobSpec) -> Result<(), String> {
    if !spec.weight.is_finite() || spec.weight < 0.0 {
        return Err("job.weight: must be a finite, non-negative number".into());
    }
    if spec.min_gpus < 0 || spec.max_gpus < spec.min_gpus {
        return Err(format!(
            "job.min_gpus/max_gpus: {} and {} are not 0 ≤ min ≤ max",
            spec.min_gpus, spec.max_gpus
        ));
    }
    let points = spec
        .throughput
        .iter()
        .map(|p| {
            u32::try_from(p.gpus)
                .map(|g| (g, p.flops))
                .map_err(|_| format!("job.throughput: negative GPU count {}", p.gpus))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Profile::new(points, "job.throughput").map_err(|e| e.to_string())?;
    Ok(())
}

fn on_cluster_event(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    e: &ClusterEvent,
) -> Step {
    let need_node = || {
        e.node
            .clone()
            .ok_or_else(|| format!("{:?} without node", e.kind))
    };
    let need_job = || {
        e.job_id
            .clone()
            .ok_or_else(|| format!("{:?} without job_id", e.kind))
    };
    let mut hit_job = None;
    let mut return_node = None;
    // Reports of what agents hold and what restores cost: state only, no
    // plan is evaluated (they arrive every few training steps).
    let noted = |trigger_kind: &'static str, ref_id: String, reason: String| {
        Ok(Planned {
            trigger_kind,
            ref_id,
            plan: Plan {
                actions: Vec::new(),
                alternatives: Vec::new(),
                chosen_index: None,
                assignment: BTreeMap::new(),
                reason,
            },
            failure_id: None,
        })
    };
    match e.kind {
        ClusterEventKind::SnapshotsStored => {
            let node = need_node()?;
            let n = snapshots::note(state, &node, &e.snapshots);
            let steps: BTreeSet<i64> = e.snapshots.iter().map(|s| s.step).collect();
            return noted(
                SNAPSHOT_REPORT,
                node.clone(),
                format!("{node} holds {n} more snapshots (steps {steps:?})"),
            );
        }
        ClusterEventKind::JobRestored => {
            let r = e
                .restored
                .as_ref()
                .ok_or_else(|| "job_restored without restored".to_string())?;
            let reason = match state.jobs.get_mut(&r.job) {
                Some(job) if !job.failure_starts.contains(&r.command_id) => format!(
                    "job {} rank {} started in {:.2} s, not after a failure: not a transition cost",
                    r.job,
                    r.rank,
                    r.restore_ms as f64 / 1000.0
                ),
                Some(job) => {
                    let cost = job.restore_costs.entry(r.action.clone()).or_default();
                    cost.add(&r.command_id, r.restore_ms);
                    format!(
                        "job {} rank {} restored from {} in {:.2} s; {} estimate {:.2} s over {} restores",
                        r.job,
                        r.rank,
                        r.source,
                        r.restore_ms as f64 / 1000.0,
                        r.action,
                        cost.mean_s(),
                        cost.count
                    )
                }
                None => format!("job {} is not planned here; restore cost not kept", r.job),
            };
            return noted("restore_report", r.job.clone(), reason);
        }
        _ => {}
    }
    let ref_id = match e.kind {
        ClusterEventKind::JobSubmitted | ClusterEventKind::JobUpdated => {
            let id = need_job()?;
            let spec = e
                .job
                .clone()
                .ok_or_else(|| format!("{:?} without job spec", e.kind))?;
            validate_spec(&spec).map_err(|reason| format!("job {id}: {reason}"))?;
            match state.jobs.get_mut(&id) {
                Some(job) => {
                    job.spec = spec;
                    job.launch = e.launch;
                }
                None => {
                    state.jobs.insert(
                        id.clone(),
                        Job {
                            spec,
                            status: JobStatus::Pending,
                            nodes: Vec::new(),
                            peak_gpus: 0,
                            launch: e.launch,
                            generation: 0,
                            restarts: 0,
                            snapshots: Default::default(),
                            restore_costs: BTreeMap::new(),
                            failure_starts: Default::default(),
                        },
                    );
                }
            }
            id
        }
        ClusterEventKind::JobFinished => {
            let id = need_job()?;
            state.jobs.remove(&id);
            state
                .in_flight
                .retain(|_, f| f.job.as_deref() != Some(id.as_str()));
            id
        }
        ClusterEventKind::NodeJoined | ClusterEventKind::NodeRepaired => {
            let id = need_node()?;
            let gpus = e.gpus.map_or(config.node_gpus, |g| g.max(0) as u32);
            let node = state.nodes.entry(id.clone()).or_insert(Node {
                gpus,
                health: Health::Healthy,
                failures: Vec::new(),
                address: None,
                snapshot_address: None,
            });
            // An agent announces its node every time it starts; only
            // node_repaired gives back a node that was taken out.
            let isolated = matches!(node.health, Health::Isolated | Health::Repairing);
            let taken_out = isolated || node.health == Health::Held;
            if e.kind == ClusterEventKind::NodeRepaired || !taken_out {
                node.health = Health::Healthy;
            }
            if e.address.is_some() {
                node.address = e.address.clone();
            }
            if e.kind == ClusterEventKind::NodeJoined {
                node.snapshot_address = e.snapshot_address.clone();
            }
            if e.gpus.is_some() {
                node.gpus = gpus;
            }
            if e.kind == ClusterEventKind::NodeJoined {
                // A (re)started agent holds no snapshots.
                snapshots::forget_node(state, &id);
            }
            if e.kind == ClusterEventKind::NodeRepaired && isolated {
                // unicron took it out, so unicron gives it back to the
                // scheduler (Slurm: RESUME of its own drain).
                return_node = Some(id.clone());
            }
            id
        }
        ClusterEventKind::NodeDown | ClusterEventKind::NodeDrained => {
            let id = need_node()?;
            let health = state.nodes.get(&id).map(|n| n.health);
            if !health.is_some_and(Health::schedulable) {
                // Unknown, or already out (isolated by unicron, or held):
                // the scheduler's verdict changes nothing.
                let why = match health {
                    None => "a node the planner does not know",
                    Some(_) => "already out of service",
                };
                let plan = policy::with_snapshot(
                    config,
                    state,
                    Vec::new(),
                    format!("scheduler reports {id} {}: {why}", scheduler_word(e)),
                );
                return Ok(Planned {
                    trigger_kind: "cluster_event",
                    ref_id: id,
                    plan,
                    failure_id: None,
                });
            }
            hit_job = replan::detach(state, &id);
            if let Some(node) = state.nodes.get_mut(&id) {
                node.health = Health::Held;
            }
            id
        }
        ClusterEventKind::NodeRemoved => {
            let id = need_node()?;
            snapshots::forget_node(state, &id);
            hit_job = replan::detach(state, &id);
            state.nodes.remove(&id);
            id
        }
        ClusterEventKind::Unknown => return Err("cluster event of unknown kind".into()),
        ClusterEventKind::SnapshotsStored | ClusterEventKind::JobRestored => {
            unreachable!("handled above")
        }
    };
    let mut plan = policy.on_capacity_change(config, state, hit_job.as_deref());
    if matches!(
        e.kind,
        ClusterEventKind::NodeDown | ClusterEventKind::NodeDrained
    ) {
        plan.reason = format!(
            "scheduler reports {ref_id} {}: out of plans; {}",
            scheduler_word(e),
            plan.reason
        );
    }
    if let Some(node) = return_node {
        plan.actions.insert(0, policy::return_action(&node));
        plan.reason = format!("{node} repaired: give it back; {}", plan.reason);
    }
    Ok(Planned {
        trigger_kind: "cluster_event",
        ref_id,
        plan,
        failure_id: None,
    })
}

/// `down (Not responding)`: the event's kind and the scheduler's reason.
fn scheduler_word(e: &ClusterEvent) -> String {
    let word = match e.kind {
        ClusterEventKind::NodeDown => "down",
        _ => "drained",
    };
    match e.reason.as_deref().filter(|r| !r.is_empty()) {
        Some(reason) => format!("{word} ({reason})"),
        None => word.to_string(),
    }
}

/// Why a SEV1 on a node still in service must not isolate it: the
/// cluster's hourly isolation limit is reached.
fn isolation_refused(config: &PlannerConfig, state: &ClusterState, hit: &Hit) -> Option<String> {
    if hit.severity != Severity::Sev1 {
        return None;
    }
    let node = hit.node.as_deref()?;
    if !state
        .nodes
        .get(node)
        .is_some_and(|n| n.health.schedulable())
    {
        return None;
    }
    let since = state.watermark_ms - ISOLATION_WINDOW_MS;
    let recent = state
        .nodes
        .values()
        .filter(|n| matches!(n.health, Health::Isolated | Health::Repairing))
        .filter(|n| n.failures.last().is_some_and(|t| *t >= since))
        .count();
    let limit = config.isolation_limit(state.nodes.len());
    (recent >= limit).then(|| {
        format!(
            "{} on {node}: {recent} nodes isolated within the last hour, the limit is {limit}; nothing more is isolated, needs an operator",
            hit.kind.symbol()
        )
    })
}

/// The policy's plan for `hit`, unless the isolation limit stops it.
fn plan_failure(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    hit: &Hit,
) -> Plan {
    if let Some(reason) = isolation_refused(config, state, hit) {
        return policy::with_snapshot(config, state, Vec::new(), reason);
    }
    // A node already out of service, no longer in the job named (its agent
    // dying after the isolation, say): there is nothing left to take out.
    if let Some(node) = hit.node.as_deref()
        && state
            .nodes
            .get(node)
            .is_some_and(|n| !n.health.schedulable())
        && hit.job.as_ref().is_none_or(|j| {
            !state
                .jobs
                .get(j)
                .is_some_and(|job| job.nodes.iter().any(|n| n == node))
        })
    {
        return policy::with_snapshot(
            config,
            state,
            Vec::new(),
            format!(
                "{} on {node}, already out of service: nothing to do",
                hit.kind.symbol()
            ),
        );
    }
    policy.on_failure(config, state, hit)
}

fn on_result(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    r: &CommandResult,
) -> Step {
    let no_change = |state: &ClusterState, reason: String| {
        policy::with_snapshot(config, state, Vec::new(), reason)
    };
    let Some(flight) = state.in_flight.get(&r.command_id).cloned() else {
        let plan = no_change(
            state,
            format!("result {:?} for a command not in flight", r.status),
        );
        return Ok(Planned {
            trigger_kind: "command_result",
            ref_id: r.command_id.clone(),
            plan,
            failure_id: None,
        });
    };
    // An agent answers for its own node: the command is done when every
    // node it names has succeeded.
    let from_node = r.node.as_deref().filter(|_| !flight.awaiting.is_empty());
    if let Some(node) = from_node
        && r.status == CommandStatus::Succeeded
    {
        let flight = state
            .in_flight
            .get_mut(&r.command_id)
            .expect("looked up above");
        if !flight.awaiting.remove(node) {
            let plan = no_change(
                state,
                format!("result from node {node}, which the command does not name or has answered"),
            );
            return Ok(Planned {
                trigger_kind: "command_result",
                ref_id: r.command_id.clone(),
                plan,
                failure_id: None,
            });
        }
        if !flight.awaiting.is_empty() {
            let (action, left) = (flight.action, flight.awaiting.len());
            let plan = no_change(
                state,
                format!("{action:?} done on {node}; {left} more nodes to answer"),
            );
            return Ok(Planned {
                trigger_kind: "command_result",
                ref_id: r.command_id.clone(),
                plan,
                failure_id: None,
            });
        }
    }
    let plan = match r.status {
        CommandStatus::Accepted | CommandStatus::Unknown => {
            no_change(state, format!("{:?} acknowledged", flight.action))
        }
        CommandStatus::Succeeded => {
            state.in_flight.remove(&r.command_id);
            let seen = state
                .observed
                .entry(flight.action.symbol().to_string())
                .or_default();
            seen.count += 1;
            seen.total_s += r.duration_ms.max(0) as f64 / 1000.0;
            if flight.action == CommandAction::IsolateNode
                && let Some(node) = flight.node.as_deref().and_then(|n| state.nodes.get_mut(n))
            {
                node.health = Health::Repairing;
            }
            no_change(state, format!("{:?} succeeded", flight.action))
        }
        // Anyone who can write the commands topic can send an unsigned or
        // forged command with the id of a real one; its rejection says
        // nothing about the real command, which stays in flight.
        CommandStatus::Rejected
            if r.reason
                .as_deref()
                .is_some_and(|why| why.starts_with("unsigned") || why.starts_with("forged")) =>
        {
            no_change(
                state,
                format!(
                    "rejection of an unsigned or forged copy of {:?} ignored",
                    flight.action
                ),
            )
        }
        CommandStatus::Rejected => {
            state.in_flight.remove(&r.command_id);
            let why = r.reason.as_deref().unwrap_or("no reason given");
            no_change(
                state,
                format!(
                    "{:?} rejected by the executor ({why}); needs an operator",
                    flight.action
                ),
            )
        }
        CommandStatus::Failed => {
            state.in_flight.remove(&r.command_id);
            let why = r.reason.as_deref().unwrap_or("no reason given");
            // A milder action failed: take the next harsher one.
            let escalated = match flight.action {
                CommandAction::Reattempt => Some(Severity::Sev2),
                CommandAction::Restart if flight.node.is_some() => Some(Severity::Sev1),
                _ => None,
            };
            match (escalated, &flight.job) {
                (Some(severity), Some(_)) => {
                    let hit = Hit {
                        job: flight.job.clone(),
                        node: flight.node.clone(),
                        kind: crate::taxonomy::FailureKind::Unknown,
                        severity,
                    };
                    let mut plan = plan_failure(config, policy, state, &hit);
                    plan.reason = format!(
                        "{:?} failed ({why}); escalate to {severity}: {}",
                        flight.action, plan.reason
                    );
                    plan
                }
                _ => no_change(
                    state,
                    format!(
                        "{:?} failed ({why}); no harsher automatic action, needs an operator",
                        flight.action
                    ),
                ),
            }
        }
    };
    Ok(Planned {
        trigger_kind: "command_result",
        ref_id: r.command_id.clone(),
        plan,
        failure_id: flight.failure_id,
    })
}

/// Jobs of a cluster that lost GPUs, for tests and status pages.
pub fn jobs_below_peak(state: &ClusterState) -> BTreeSet<String> {
    state
        .jobs
        .iter()
        .filter(|(_, j)| state.gpus_of(&j.nodes) < j.peak_gpus)
        .map(|(id, _)| id.clone())
        .collect()
}
