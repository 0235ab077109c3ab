//! The executor's actions: judged when they arrive (answered at once),
//! carried out at their effect time, and the repairs isolation leads to.
//!
//! Judging looks up what an action acts on and hands that on in an
//! [`Accepted`]: nodes and jobs are never added or removed, so the
//! positions found then still hold when the action takes effect.

use unicron_core::executor::{ActionRequest, ActionResponse, Outcome};
use unicron_core::{ClusterEventKind, CommandAction, Severity};

use super::{Emission, Job, NodeState, Phase, Sim, TICK_MS};
use crate::config::Transitions;

const SIGTERM: i32 = 15;

/// An action accepted and waiting for its effect time.
#[derive(Debug, Clone)]
pub(super) struct Scheduled {
    /// The job the request names, whatever the action: a job with an
    /// action on its way counts as placed, and its watchdog holds off.
    pub(super) job: Option<String>,
    accepted: Accepted,
}

/// What judging an action found: its effect on the nodes and jobs it
/// names (by position), and how long it takes.
#[derive(Debug, Clone)]
struct Accepted {
    action: CommandAction,
    effect: Effect,
    duration_ms: i64,
}

#[derive(Debug, Clone)]
enum Effect {
    Isolate {
        node: usize,
    },
    Reattempt {
        job: usize,
    },
    Restart {
        job: usize,
        restore_from: Option<String>,
    },
    /// Reconfigure or resume `job` on `nodes`.
    Place {
        job: usize,
        nodes: Vec<usize>,
        restore_from: Option<String>,
    },
    Pause {
        job: usize,
    },
    /// The simulated scheduler has no drain to lift: the repair already
    /// put the node back.
    ReturnNode,
}

fn ms(s: f64) -> i64 {
    (s * 1000.0) as i64
}

impl Sim {
    /// Answers an action now and schedules its effect; a repeated command
    /// id gets the first answer again and acts once (the HTTP contract's
    /// idempotency).
    pub fn act(&mut self, request: &ActionRequest) -> ActionResponse {
        if let Some(answer) = self.answered.get(&request.command_id) {
            self.truth.duplicate_requests += 1;
            return answer.clone();
        }
        let dispatch = (self.config.dispatch_s * 1000.0) as i64;
        let wanted = request.time_ms.saturating_add(dispatch);
        // The tick at `now` has run: an effect due then is already late.
        if wanted <= self.now {
            self.truth.late_actions += 1;
        }
        let apply_at = wanted.max(self.now + TICK_MS);
        let answer = match self.judge(request) {
            Ok(accepted) => {
                let duration_ms = accepted.duration_ms;
                self.truth.count_action(request.action);
                self.scheduled.insert(
                    (apply_at, request.command_id.clone()),
                    Scheduled {
                        job: request.job.clone(),
                        accepted,
                    },
                );
                ActionResponse {
                    status: Outcome::Succeeded,
                    reason: None,
                    duration_ms: Some(duration_ms),
                    completed_ms: Some(apply_at + duration_ms),
                }
            }
            Err(reason) => {
                self.truth.failed_actions += 1;
                ActionResponse {
                    status: Outcome::Failed,
                    reason: Some(reason),
                    duration_ms: Some(0),
                    completed_ms: Some(apply_at),
                }
            }
        };
        self.answered
            .insert(request.command_id.clone(), answer.clone());
        answer
    }

    /// Whether the action can work: if so, what it acts on and how long
    /// it takes; if not, why.
    fn judge(&self, request: &ActionRequest) -> Result<Accepted, String> {
        if request.cluster != self.config.cluster {
            return Err(format!("unknown cluster `{}`", request.cluster));
        }
        let t = &self.config.transitions;
        let job = || -> Result<usize, String> {
            let id = request.job.as_deref().ok_or("the action names no job")?;
            self.jobs
                .position(id)
                .ok_or_else(|| format!("no such job `{id}`"))
        };
        let first_node = |action: &str| -> Result<usize, String> {
            let node = request
                .nodes
                .first()
                .ok_or_else(|| format!("{action} names no node"))?;
            self.nodes
                .position(node)
                .ok_or_else(|| format!("no such node `{node}`"))
        };
        let fault_of = |job: &Job| job.fault.map(|i| &self.truth.faults[i]);
        let restore_from = self.restore_from(request).map(str::to_string);
        let (effect, seconds) = match request.action {
            CommandAction::Reattempt => {
                let job = job()?;
                if let Some(f) = fault_of(&self.jobs[job])
                    && f.needs != Severity::Sev3
                {
                    return Err(format!(
                        "fault persists: {} on {} needs {}",
                        f.kind, f.node, f.needs
                    ));
                }
                (Effect::Reattempt { job }, t.reattempt_s)
            }
            CommandAction::Restart => {
                let job = job()?;
                if let Some(f) = fault_of(&self.jobs[job])
                    && f.needs == Severity::Sev1
                    && self.jobs[job].nodes.contains(&f.node)
                {
                    return Err(format!(
                        "{} failed again on restart: {} needs the node taken out",
                        f.node, f.kind
                    ));
                }
                let seconds = restart_s(t, restore_from.as_deref());
                (Effect::Restart { job, restore_from }, seconds)
            }
            CommandAction::IsolateNode => {
                let node = first_node("isolate_node")?;
                (Effect::Isolate { node }, 0.0)
            }
            CommandAction::Reconfigure | CommandAction::Resume => {
                let job = job()?;
                let nodes = request
                    .nodes
                    .iter()
                    .map(|name| match self.nodes.position(name) {
                        None => Err(format!("no such node `{name}`")),
                        Some(n) if self.nodes[n].state == NodeState::Down => {
                            Err(format!("node `{name}` is down"))
                        }
                        Some(n) => Ok(n),
                    })
                    .collect::<Result<Vec<usize>, String>>()?;
                let seconds = if self.jobs[job].phase == Phase::Pending {
                    t.resume_s
                } else if request.action == CommandAction::Resume {
                    t.resume_s.max(restart_s(t, restore_from.as_deref()))
                } else {
                    t.reconfigure_s
                };
                let effect = Effect::Place {
                    job,
                    nodes,
                    restore_from,
                };
                (effect, seconds)
            }
            CommandAction::Pause => (Effect::Pause { job: job()? }, 0.0),
            CommandAction::ReturnNode => {
                first_node("return_node")?;
                (Effect::ReturnNode, 0.0)
            }
            CommandAction::CheckNode => {
                return Err(
                    "check_node: simulated nodes run no pre-flight check (planner.preflight off)"
                        .into(),
                );
            }
            CommandAction::Unknown => return Err("unknown action".into()),
        };
        Ok(Accepted {
            action: request.action,
            effect,
            duration_ms: ms(seconds),
        })
    }

    /// Carries out the accepted actions whose effect time has come, in
    /// time order (and by command id within a tick).
    pub(super) fn apply_due(&mut self, out: &mut Vec<Emission>) {
        while let Some(entry) = self.scheduled.first_entry()
            && entry.key().0 <= self.now
        {
            let scheduled = entry.remove();
            self.apply(scheduled.accepted, out);
        }
    }

    /// The effect of an accepted action, at its effect time. What the
    /// judge checked of the state then may have changed since (a node
    /// failed, a fault was resolved): the effect goes by the state now.
    fn apply(&mut self, accepted: Accepted, out: &mut Vec<Emission>) {
        let t = self.config.transitions.clone();
        let now = self.now;
        let action = accepted.action;
        match accepted.effect {
            Effect::Isolate { node } => self.isolate(node, action),
            Effect::Reattempt { job } => {
                self.resolve_fault_of(job, action);
                let job = &mut self.jobs[job];
                if job.phase != Phase::Pending && job.phase != Phase::Paused {
                    job.phase = Phase::Transition {
                        until: now + ms(t.reattempt_s),
                    };
                }
            }
            Effect::Restart { job, restore_from } => {
                self.stop_processes(job, out);
                self.resolve_fault_of(job, action);
                let job = &mut self.jobs[job];
                restore(job, restore_from.as_deref());
                if !job.nodes.is_empty() {
                    job.phase = Phase::Transition {
                        until: now + ms(restart_s(&t, restore_from.as_deref())),
                    };
                }
            }
            Effect::Place {
                job,
                nodes,
                restore_from,
            } => {
                let first_start = self.jobs[job].phase == Phase::Pending;
                self.stop_processes(job, out);
                let usable: Vec<usize> = nodes
                    .into_iter()
                    .filter(|n| self.nodes[*n].state == NodeState::Up)
                    .collect();
                let id = self.jobs.name(job).to_string();
                self.release_nodes(&id);
                for &n in &usable {
                    let (name, node) = self.nodes.entry_mut(n);
                    if let Some(other) = node.job.replace(id.clone())
                        && let Some(other) = self.jobs.get_mut(&other)
                    {
                        other.nodes.retain(|m| m != name);
                    }
                }
                self.resolve_fault_of(job, action);
                let names = usable
                    .iter()
                    .map(|n| self.nodes.name(*n).to_string())
                    .collect();
                let job = &mut self.jobs[job];
                if !first_start {
                    restore(job, restore_from.as_deref());
                }
                job.nodes = names;
                let base = if first_start {
                    t.resume_s
                } else if action == CommandAction::Resume {
                    t.resume_s.max(restart_s(&t, restore_from.as_deref()))
                } else {
                    t.reconfigure_s
                };
                job.phase = if job.nodes.is_empty() {
                    Phase::Paused
                } else {
                    Phase::Transition {
                        until: now + ms(base),
                    }
                };
            }
            Effect::Pause { job } => {
                self.stop_processes(job, out);
                let id = self.jobs.name(job).to_string();
                self.release_nodes(&id);
                let job = &mut self.jobs[job];
                job.nodes.clear();
                job.phase = Phase::Paused;
            }
            Effect::ReturnNode => {}
        }
    }

    /// Takes node `node` out until its repair: its fault is resolved, and
    /// its job loses it (and stalls, if it was running).
    fn isolate(&mut self, node: usize, action: CommandAction) {
        // A real trace's fault keeps the node out until the trace repaired it.
        let repaired_at = self.nodes[node]
            .fault
            .and_then(|index| self.truth.faults[index].repaired_at_ms);
        let repair_at = match repaired_at {
            Some(at) => at.max(self.now),
            None => self.now + ms(self.config.repair_s),
        };
        let isolated = &mut self.nodes[node];
        if !matches!(isolated.state, NodeState::Isolated { .. }) {
            isolated.state = NodeState::Isolated {
                repair_at,
                dark: isolated.state == NodeState::Down,
            };
            self.repairs.insert((repair_at, node));
        }
        if let Some(index) = isolated.fault.take() {
            let job = isolated
                .job
                .as_deref()
                .and_then(|id| self.jobs.position(id));
            self.resolve(index, job, action);
        }
        let (name, isolated) = self.nodes.entry_mut(node);
        if let Some(job_id) = isolated.job.take()
            && let Some(job) = self.jobs.get_mut(&job_id)
        {
            job.nodes.retain(|n| n != name);
            if job.fault.is_some_and(|i| self.truth.faults[i].node == name) {
                job.fault = None;
            }
            if job.phase == Phase::Running {
                job.phase = Phase::Stalled;
            }
        }
    }

    /// Isolated nodes whose repair is done come back, healthy.
    pub(super) fn repair_nodes(&mut self, out: &mut Vec<Emission>) {
        // Every (repair time, node) up to now: a later time sorts after
        // (now + 1, 0) whatever the node.
        let later = self.repairs.split_off(&(self.now + 1, 0));
        let due = std::mem::replace(&mut self.repairs, later);
        // In node order, as a scan of every node would find them.
        let mut due: Vec<usize> = due.into_iter().map(|(_, node)| node).collect();
        due.sort();
        for position in due {
            let node = &mut self.nodes[position];
            node.state = NodeState::Up;
            node.fault = None;
            node.next_heartbeat = self.now;
            // Repaired (rebooted, the GPU replaced): DCGM's volatile error
            // counters start again from zero, not from the fault's count.
            node.ecc_dbe.iter_mut().for_each(|c| *c = 0.0);
            out.push(self.node_event(ClusterEventKind::NodeRepaired, self.nodes.name(position)));
        }
    }

    /// Where `request` restores its job from: the replica it names, unless
    /// this cluster's restarts (or reconfigurations) always roll back.
    fn restore_from<'a>(&self, request: &'a ActionRequest) -> Option<&'a str> {
        let rolls_back = match request.action {
            CommandAction::Restart => self.config.restart_rolls_back,
            _ => self.config.reconfigure_rolls_back,
        };
        if rolls_back {
            None
        } else {
            request.restore_from.as_deref()
        }
    }

    /// Resolves fault `index` by `action`, for job `job` (a position) if it
    /// has one: its downtime runs until the job runs again.
    fn resolve(&mut self, index: usize, job: Option<usize>, action: CommandAction) {
        self.truth.resolve(index, self.now, action);
        if let Some(job) = job.map(|j| &mut self.jobs[j])
            && !job.recovering.contains(&index)
        {
            job.recovering.push(index);
        }
    }

    /// Resolves the open fault of job `job` by `action`, if it has one.
    fn resolve_fault_of(&mut self, job: usize, action: CommandAction) {
        if let Some(index) = self.jobs[job].fault.take() {
            self.resolve(index, Some(job), action);
            self.clear_node_fault(index);
        }
    }

    /// A fault fixed by an action on its job no longer marks its node
    /// (unless the node itself is broken: SEV1 stays until isolation).
    fn clear_node_fault(&mut self, index: usize) {
        let fault = &self.truth.faults[index];
        if let Some(node) = self.nodes.get_mut(&fault.node)
            && node.fault == Some(index)
        {
            node.fault = None;
        }
    }

    /// Nodes assigned to job `id` are free again.
    fn release_nodes(&mut self, id: &str) {
        for node in self.nodes.values_mut() {
            if node.job.as_deref() == Some(id) {
                node.job = None;
            }
        }
    }

    /// SIGTERM to every rank of job `job` (a position) if it has
    /// processes: a requested stop, which the detector must not take for a
    /// failure.
    fn stop_processes(&mut self, job: usize, out: &mut Vec<Emission>) {
        let (id, stopped) = (self.jobs.name(job), &self.jobs[job]);
        if matches!(stopped.phase, Phase::Pending | Phase::Paused) {
            return;
        }
        let exits: Vec<Emission> = stopped
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                self.nodes
                    .get(n)
                    .is_some_and(|n| n.state != NodeState::Down)
            })
            .map(|(rank, node)| self.exit(node, id, rank as u32, None, Some(SIGTERM)))
            .collect();
        if !exits.is_empty() {
            self.jobs[job].iterations_seen = 0;
        }
        out.extend(exits);
    }
}

/// Rolls a job back to its checkpoint unless it restores from a replica.
fn restore(job: &mut Job, restore_from: Option<&str>) {
    let from_replica = restore_from.is_some_and(|r| r.starts_with("replica:"));
    if !from_replica {
        job.iteration = job.checkpoint_iteration;
    }
    job.partial = 0.0;
}

fn restart_s(t: &Transitions, restore_from: Option<&str>) -> f64 {
    if restore_from.is_some_and(|r| r.starts_with("replica:")) {
        t.restart_replica_s
    } else {
        t.restart_checkpoint_s
    }
}
