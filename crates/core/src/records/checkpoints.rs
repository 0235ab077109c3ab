//! Planner checkpoints (`unicron.planner-checkpoints`).

use serde::{Deserialize, Serialize};

/// Part of a planner checkpoint of one input partition
/// (`unicron.planner-checkpoints`, key: cluster; a manifest: none): a chunk
/// of one cluster's stored state, or the manifest that closes the
/// checkpoint. A planner taking over the partition starts from it instead
/// of the beginning of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerCheckpoint {
    pub input_partition: i32,
    /// Empty in a manifest.
    pub cluster: String,
    /// A chunk of the cluster's state as the planner stores it (JSON).
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
    pub manifest: Option<CheckpointManifest>,
}

/// Closes a checkpoint: where its states are, and the input and decision
/// positions they reflect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointManifest {
    pub consumed: Vec<ConsumedOffset>,
    /// First offset of the decisions partition the states do not reflect.
    pub decisions_next_offset: i64,
    pub clusters: Vec<CheckpointedCluster>,
}

/// One input topic's position in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumedOffset {
    pub topic: String,
    pub next_offset: i64,
}

/// Where one cluster's state is in the checkpoint topic's partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointedCluster {
    pub cluster: String,
    pub chunk_offsets: Vec<i64>,
}
