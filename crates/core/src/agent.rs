//! What a node agent does with a verified command, with no I/O: whether it
//! takes part ([`part`]) and what happens to its node's workers ([`step`]).
//! The rendezvous comes from the command alone: node rank is the node's
//! place in `nodes`, the master is the first node, so no agent hosts a
//! store the job depends on.

use crate::executor::Part;
use crate::records::{Command, CommandAction, SnapshotPlan};

/// Where this node's workers meet the others, from a start command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub job: String,
    /// This node's rank among the job's nodes (torchrun's GROUP_RANK).
    pub node_rank: u32,
    pub nodes: u32,
    /// The job's nodes in rank order.
    pub node_names: Vec<String>,
    pub generation: i64,
    pub master_addr: String,
    pub master_port: u16,
    /// `replica:<node>` or `checkpoint`; `None` for a first start.
    pub restore_from: Option<String>,
    /// The start's restore point and replica placement, when the planner
    /// gave one.
    pub snapshots: Option<Box<SnapshotPlan>>,
}

/// This node's part in a `check_node` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRole {
    pub command_id: String,
    /// The node checked (it reports `node_checked`).
    pub node: String,
    /// The checked peer of the all-reduce, if the planner found one.
    pub peer: Option<String>,
    /// 0 on the checked node, 1 on its peer.
    pub pair_rank: u32,
    /// Where the pair meets: the checked node's address and the port.
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
}

/// Where one local rank resumes from, as its worker is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankRestore {
    /// `memory`, `replica:<node>` or `checkpoint`.
    pub resume_from: String,
    /// The step to resume at; `None`: the disk checkpoint.
    pub step: Option<i64>,
    /// The earlier rank whose state it takes.
    pub from_rank: Option<i32>,
    /// The node holding it (this node for `memory`).
    pub node: Option<String>,
}

impl Role {
    /// Where global `rank` resumes from on `node`; `None` on a first start
    /// with no snapshot.
    pub fn restore_of(&self, node: &str, rank: i32) -> Option<RankRestore> {
        let plan = self.snapshots.as_ref();
        if let Some(step) = plan.and_then(|p| p.step)
            && let Some(source) = plan
                .into_iter()
                .flat_map(|p| &p.sources)
                .find(|s| s.rank == rank)
        {
            let resume_from = if source.node == node {
                "memory".to_string()
            } else {
                format!("replica:{}", source.node)
            };
            return Some(RankRestore {
                resume_from,
                step: Some(step),
                from_rank: Some(source.from_rank),
                node: Some(source.node.clone()),
            });
        }
        self.restore_from.as_ref().map(|_| RankRestore {
            resume_from: "checkpoint".to_string(),
            step: None,
            from_rank: None,
            node: None,
        })
    }

    /// Workers snapshot the steps that are a multiple of this: the
    /// interval the planner chose for this start (1 when it gave none).
    pub fn snapshot_every(&self) -> i64 {
        self.snapshots
            .as_ref()
            .map_or(1, |p| p.interval_steps.max(1))
    }

    /// The node that keeps this node's replicas, and its address.
    pub fn replica_holder(&self) -> Option<(&str, &str)> {
        let plan = self.snapshots.as_ref()?;
        let holder = plan.replica_holders.get(self.node_rank as usize)?;
        let peer = plan.peers.iter().find(|p| &p.node == holder)?;
        Some((holder.as_str(), peer.address.as_str()))
    }

    /// The node whose replicas `node` keeps (the one it is the holder of).
    pub fn replica_sender(&self, node: &str) -> Option<&str> {
        let plan = self.snapshots.as_ref()?;
        plan.replica_holders
            .iter()
            .position(|h| h == node)
            .and_then(|i| self.node_names.get(i))
            .map(String::as_str)
    }

    /// A peer's snapshot service address, as the command names it.
    pub fn peer_address(&self, node: &str) -> Option<&str> {
        let plan = self.snapshots.as_ref()?;
        plan.peers
            .iter()
            .find(|p| p.node == node)
            .map(|p| p.address.as_str())
    }
}

/// What the agent does to its node's workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentStep {
    /// Stop whatever runs here, then start the job's workers as `Role`.
    Start(Role),
    /// Stop the workers of `job`, or all of them (`None`); start nothing.
    Stop { job: Option<String> },
    /// The command names this node for a job it cannot run.
    Refuse(String),
    /// Run the pre-flight check (as the checked node, or as its peer in
    /// the pairwise all-reduce); the workers are left alone.
    Check(CheckRole),
    /// Nothing to do here.
    Nothing,
}

/// Whether an agent on `node`, which may run the jobs `declared` says
/// yes to, takes part in `command`. Decided from the command and the
/// agent's configuration only, so the answer is the same before and after
/// it acts. Only a node a command names answers; an agent that must stop a
/// job's workers because a re-plan dropped its node acts silently. Where
/// the scheduler isolates nodes (`scheduler_isolates`: an executor drains
/// them in Slurm), the executor's result is the isolation's and the agent
/// only stops its workers.
pub fn part(
    node: &str,
    declared: impl Fn(&str) -> bool,
    scheduler_isolates: bool,
    command: &Command,
) -> Part {
    let named = command.nodes.iter().any(|n| n == node);
    let local_job = command.job.as_deref().is_some_and(&declared);
    match command.action {
        CommandAction::IsolateNode if named && scheduler_isolates => Part::Silent,
        CommandAction::IsolateNode if named => Part::Answer,
        CommandAction::IsolateNode => Part::Skip,
        // The scheduler's executor gives the node back; the agent starts
        // nothing until a re-plan names the node.
        CommandAction::ReturnNode => Part::Skip,
        // The checked node answers; its peer only joins the all-reduce.
        CommandAction::CheckNode if command.nodes.first().is_some_and(|n| n == node) => {
            Part::Answer
        }
        CommandAction::CheckNode if named => Part::Silent,
        CommandAction::CheckNode => Part::Skip,
        // A pause names no node: every agent that may run the job stops it
        // if it runs here, and says so (the first answer is final).
        CommandAction::Pause if local_job => Part::Answer,
        CommandAction::Pause => Part::Skip,
        CommandAction::Reattempt
        | CommandAction::Restart
        | CommandAction::Reconfigure
        | CommandAction::Resume => match (&command.rendezvous, named, local_job) {
            // Not an agent-launched job: an executor's backend handles it.
            (None, _, _) => Part::Skip,
            (Some(_), true, _) => Part::Answer,
            (Some(_), false, true) => Part::Silent,
            (Some(_), false, false) => Part::Skip,
        },
        CommandAction::Unknown => {
            if named {
                Part::Answer
            } else {
                Part::Skip
            }
        }
    }
}

/// What `command` (verified, and one this agent takes part in) does to the
/// workers of `node`, which runs `running` (a job id) or nothing.
pub fn step(
    node: &str,
    declared: impl Fn(&str) -> bool,
    running: Option<&str>,
    command: &Command,
) -> AgentStep {
    let job = command.job.as_deref();
    match command.action {
        CommandAction::IsolateNode => AgentStep::Stop { job: None },
        CommandAction::ReturnNode => AgentStep::Nothing,
        CommandAction::CheckNode => match command.nodes.iter().position(|n| n == node) {
            Some(rank) => AgentStep::Check(CheckRole {
                command_id: command.id.clone(),
                node: command.nodes[0].clone(),
                peer: command.nodes.get(1).cloned(),
                pair_rank: rank as u32,
                master_addr: command.rendezvous.as_ref().map(|r| r.master_addr.clone()),
                master_port: command
                    .rendezvous
                    .as_ref()
                    .and_then(|r| u16::try_from(r.master_port).ok()),
            }),
            None => AgentStep::Nothing,
        },
        CommandAction::Pause => match (job, running) {
            (Some(j), Some(r)) if j == r => AgentStep::Stop {
                job: Some(j.to_string()),
            },
            _ => AgentStep::Nothing,
        },
        CommandAction::Reattempt
        | CommandAction::Restart
        | CommandAction::Reconfigure
        | CommandAction::Resume => {
            let (Some(job), Some(rendezvous)) = (job, &command.rendezvous) else {
                return AgentStep::Nothing;
            };
            let Some(rank) = command.nodes.iter().position(|n| n == node) else {
                // Dropped from the job by a re-plan: stop it if it runs here.
                return if running == Some(job) {
                    AgentStep::Stop {
                        job: Some(job.to_string()),
                    }
                } else {
                    AgentStep::Nothing
                };
            };
            if !declared(job) {
                return AgentStep::Refuse(format!(
                    "job {job} is not in this agent's configuration; an agent runs only the command lines it was given"
                ));
            }
            let Ok(master_port) = u16::try_from(rendezvous.master_port) else {
                return AgentStep::Refuse(format!(
                    "master port {} is not a TCP port",
                    rendezvous.master_port
                ));
            };
            AgentStep::Start(Role {
                job: job.to_string(),
                node_rank: rank as u32,
                nodes: command.nodes.len() as u32,
                node_names: command.nodes.clone(),
                generation: rendezvous.generation,
                master_addr: rendezvous.master_addr.clone(),
                master_port,
                restore_from: command.restore_from.clone(),
                snapshots: command.snapshots.clone().map(Box::new),
            })
        }
        CommandAction::Unknown => AgentStep::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Rendezvous;

    fn command(action: CommandAction, job: Option<&str>, nodes: &[&str], rdv: bool) -> Command {
        Command {
            id: "c1".into(),
            cluster: "c".into(),
            decision_id: "d1".into(),
            time_ms: 0,
            action,
            job: job.map(str::to_string),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            restore_from: Some("checkpoint".into()),
            causation: Vec::new(),
            key_id: String::new(),
            signature: Vec::new(),
            rendezvous: rdv.then(|| Rendezvous {
                generation: 3,
                master_addr: "10.0.0.2".into(),
                master_port: 29503,
            }),
            snapshots: None,
        }
    }

    fn both(_: &str) -> bool {
        true
    }

    #[test]
    fn named_nodes_start_with_their_rank_and_others_stop_silently() {
        let c = command(CommandAction::Reconfigure, Some("a"), &["n2", "n4"], true);
        assert_eq!(part("n4", both, false, &c), Part::Answer);
        let AgentStep::Start(role) = step("n4", both, Some("b"), &c) else {
            panic!("n4 is named")
        };
        assert_eq!((role.node_rank, role.nodes, role.generation), (1, 2, 3));
        assert_eq!(
            (role.master_addr.as_str(), role.master_port),
            ("10.0.0.2", 29503)
        );
        assert_eq!(part("n1", both, false, &c), Part::Silent);
        assert_eq!(
            step("n1", both, Some("a"), &c),
            AgentStep::Stop {
                job: Some("a".into())
            }
        );
        assert_eq!(step("n1", both, Some("b"), &c), AgentStep::Nothing);
        assert_eq!(part("n1", |j| j == "b", false, &c), Part::Skip);
    }

    #[test]
    fn a_job_not_configured_here_is_refused_and_commands_without_rendezvous_ignored() {
        let c = command(CommandAction::Restart, Some("a"), &["n1"], true);
        assert!(matches!(
            step("n1", |_| false, None, &c),
            AgentStep::Refuse(_)
        ));
        let plain = command(CommandAction::Restart, Some("a"), &["n1"], false);
        assert_eq!(part("n1", both, false, &plain), Part::Skip);
    }

    #[test]
    fn isolation_stops_everything_on_the_named_node_only() {
        let c = command(CommandAction::IsolateNode, None, &["n3"], false);
        assert_eq!(part("n3", both, false, &c), Part::Answer);
        assert_eq!(part("n3", both, true, &c), Part::Silent);
        assert_eq!(part("n2", both, false, &c), Part::Skip);
        assert_eq!(
            step("n3", both, Some("a"), &c),
            AgentStep::Stop { job: None }
        );
    }
}
