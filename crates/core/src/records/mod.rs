//! The records on unicron's topics (docs/design.md §3), one struct per Avro schema in
//! `schemas/`. Field names, order and optionality match the schemas; times
//! are event times in milliseconds since the Unix epoch.
//!
//! One file per topic family; every type is re-exported here, so paths stay
//! `crate::records::X`.

mod checkpoints;
mod cluster_events;
mod commands;
mod dead_letters;
mod decisions;
mod detector_rounds;
mod failures;
mod observations;

pub use checkpoints::{CheckpointManifest, CheckpointedCluster, ConsumedOffset, PlannerCheckpoint};
pub use cluster_events::{
    AgentLaunch, ClusterEvent, ClusterEventKind, JobSpec, NodeCheck, RestoreReport, SnapshotHeld,
    ThroughputPoint,
};
pub use commands::{
    Command, CommandAction, CommandResult, CommandStatus, RankSource, Rendezvous, SnapshotPeer,
    SnapshotPlan,
};
pub use dead_letters::DeadLetter;
pub use decisions::{Alternative, Decision, Trigger};
pub use detector_rounds::{
    DetectorRound, PartitionRef, RoundRange, RoundTick, UnclassifiedTemplate,
};
pub use failures::{DetectionMethod, Evidence, FailureEvent};
pub use observations::{
    AgentEvent, AgentEventKind, LogRecord, MetricSample, TelemetryBatch, WorkerChange, WorkerReport,
};

pub use crate::taxonomy::{FailureKind, Severity};
