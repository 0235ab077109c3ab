//! Detector rounds (`unicron.detector-rounds`).

use serde::{Deserialize, Serialize};

/// One round of a detector instance (`unicron.detector-rounds`, key: the
/// instance): which input records it applied together, and every other
/// input that moved its timers. A detector applies what it has read in
/// rounds, each in one canonical order ([`crate::detector::Detector::apply_round`]),
/// so its failures are a function of the rounds and the input log: replay
/// applies the same rounds to the same records and must get the same
/// failures, whatever order the live consumer read partitions in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DetectorRound {
    /// The detector instance (one process run); its rounds are in order
    /// on one partition.
    pub detector: String,
    /// The round's number within the instance, from 0.
    pub seq: i64,
    /// State was forgotten before this round (the group moved partitions).
    pub reset: bool,
    /// Heartbeat and hang timers were held (lost broker connection, or
    /// input lag beyond the guard).
    pub silence_held: bool,
    /// Partitions found read to their end since the previous round.
    pub caught_up: Vec<PartitionRef>,
    /// The input records applied, as runs of consecutive offsets.
    pub ranges: Vec<RoundRange>,
    /// Idle ticks applied after the records.
    pub ticks: Vec<RoundTick>,
    /// The ids of the failures the round emitted, in order.
    pub failures: Vec<String>,
    /// Partitions found to have unread records (or whose end the consumer
    /// could not confirm) since the previous round, though the last record
    /// read from them was their newest then: they hold the timers back
    /// again until read.
    #[serde(default)]
    pub behind: Vec<PartitionRef>,
    /// A warm-up round: records below the group's committed offsets, read
    /// again after a takeover to rebuild the state (last heartbeats, open
    /// symptom groups) the previous owner held. Its failures are dropped:
    /// the previous owner answered for those records.
    #[serde(default)]
    pub warm: bool,
    /// The service's wall clock when it applied the round, ms since the
    /// epoch: the only processing time the detector decides on (symptom
    /// groups settle by it, [`crate::detector::DetectorConfig::symptom_settle_s`]).
    /// 0 in rounds written before it was recorded: no settling.
    #[serde(default)]
    pub read_ms: i64,
}

/// A topic's partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionRef {
    pub topic: String,
    pub partition: i32,
}

/// Records `first_offset..=last_offset` of one partition, every one of
/// them applied in the round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundRange {
    pub topic: String,
    pub partition: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The last record was the partition's newest when read.
    pub last_caught_up: bool,
}

/// An idle tick: the cluster's clock moved to `time_ms` with no record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundTick {
    pub cluster: String,
    pub time_ms: i64,
}
