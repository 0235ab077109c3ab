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
    /// The version of the log rules the round was applied with
    /// ([`crate::detector::LogRules::version`]); empty in older rounds.
    #[serde(default)]
    pub rules_version: String,
    /// The site's rules file text (empty: built-ins only), in an instance's
    /// first round and in the round after it changed: the detector switches
    /// to them before applying the round, so replay does too.
    #[serde(default)]
    pub rules: Option<String>,
    /// Error-marked log lines no rule took, by cluster and template (at
    /// most [`crate::detector::templates::PER_ROUND`] a cluster and
    /// [`crate::detector::ROUND_UNCLASSIFIED`] in all, the most frequent):
    /// what the status page lists as unclassified errors. Derived, not
    /// replayed.
    #[serde(default)]
    pub unclassified: Vec<UnclassifiedTemplate>,
}

/// One template of error-marked log lines no rule took, as seen in a round.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnclassifiedTemplate {
    pub cluster: String,
    /// The lines with variable tokens masked as `<*>`.
    pub template: String,
    pub count: i64,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Up to eight nodes and jobs that logged it.
    pub nodes: Vec<String>,
    pub jobs: Vec<String>,
    /// The first such line, cut to 512 bytes.
    pub example: String,
    /// The kind the learned tier named for the example (below the
    /// threshold: none), and its score in thousandths.
    #[serde(default)]
    pub learned: Option<String>,
    #[serde(default)]
    pub score_permille: i32,
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
