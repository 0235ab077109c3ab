//! Commands (`unicron.commands`) and their results at the executors
//! (`unicron.command-results`).

use serde::{Deserialize, Serialize};

/// What an executor is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandAction {
    Reattempt,
    Restart,
    Reconfigure,
    IsolateNode,
    Resume,
    Pause,
    Unknown,
    /// Give a node unicron isolated back to the scheduler (Slurm: RESUME,
    /// only if unicron's own drain is still on it).
    ReturnNode,
    /// Run the pre-flight check on a node (its agent answers with a
    /// `node_checked` cluster event) before plans may use it.
    CheckNode,
}

impl CommandAction {
    /// The symbol used in schemas, JSON, the HTTP contract and metrics.
    pub fn symbol(self) -> &'static str {
        match self {
            CommandAction::Reattempt => "reattempt",
            CommandAction::Restart => "restart",
            CommandAction::Reconfigure => "reconfigure",
            CommandAction::IsolateNode => "isolate_node",
            CommandAction::Resume => "resume",
            CommandAction::Pause => "pause",
            CommandAction::Unknown => "unknown",
            CommandAction::ReturnNode => "return_node",
            CommandAction::CheckNode => "check_node",
        }
    }
}

/// A signed action for an executor (`unicron.commands`, key: cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub id: String,
    pub cluster: String,
    pub decision_id: String,
    pub time_ms: i64,
    pub action: CommandAction,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub nodes: Vec<String>,
    #[serde(default)]
    pub restore_from: Option<String>,
    #[serde(default)]
    pub causation: Vec<String>,
    pub key_id: String,
    #[serde(with = "serde_bytes")]
    pub signature: Vec<u8>,
    /// Start commands of agent-launched jobs: where the workers meet.
    #[serde(default)]
    pub rendezvous: Option<Rendezvous>,
    /// Start commands of agent-launched jobs: the step every rank resumes
    /// from, where each rank's state is, and where replicas go.
    #[serde(default)]
    pub snapshots: Option<SnapshotPlan>,
}

/// The restore point of a start command (see `schemas/Command.avsc`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SnapshotPlan {
    /// `None`: the job's disk checkpoint (or a first start).
    #[serde(default)]
    pub step: Option<i64>,
    pub reason: String,
    /// One per rank of the new layout when `step` is set.
    #[serde(default)]
    pub sources: Vec<RankSource>,
    /// Parallel to the command's `nodes`: who keeps that node's replicas
    /// (empty: nobody).
    #[serde(default)]
    pub replica_holders: Vec<String>,
    /// Snapshot service of every node named above.
    #[serde(default)]
    pub peers: Vec<SnapshotPeer>,
    /// Workers snapshot the steps that are a multiple of this (0 or 1:
    /// every step).
    #[serde(default)]
    pub interval_steps: i64,
    /// Why that interval (measured costs, failure rate, bounds).
    #[serde(default)]
    pub interval_reason: String,
}

/// Where one rank of a new layout takes its state from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSource {
    pub rank: i32,
    pub from_rank: i32,
    pub node: String,
}

/// A node's snapshot service address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPeer {
    pub node: String,
    pub address: String,
}

/// The torch.distributed rendezvous a start command hands out; node ranks
/// are the order of the command's `nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendezvous {
    /// The job's start count (`UNICRON_GENERATION`).
    pub generation: i64,
    pub master_addr: String,
    pub master_port: i32,
}

/// Outcome of a command at an executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandStatus {
    Accepted,
    Succeeded,
    Failed,
    Rejected,
    Unknown,
}

/// What an executor did with a command (`unicron.command-results`, key: cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    pub command_id: String,
    pub cluster: String,
    pub time_ms: i64,
    pub status: CommandStatus,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub duration_ms: i64,
    pub executor: String,
    /// The node this result answers for (agents); `None`: the whole command.
    #[serde(default)]
    pub node: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_symbols_match_their_json() {
        for action in [
            CommandAction::Reattempt,
            CommandAction::Restart,
            CommandAction::Reconfigure,
            CommandAction::IsolateNode,
            CommandAction::Resume,
            CommandAction::Pause,
            CommandAction::Unknown,
        ] {
            let json = serde_json::to_string(&action).unwrap();
            assert_eq!(json, format!("\"{}\"", action.symbol()));
        }
    }
}
