//! The clocks the detector's timers run on: each cluster's clock, robust to
//! one node's clock running ahead, and how far each source partition has
//! been read, so a partition that is behind holds the watermark back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::SourceRecord;
use super::config::{DetectorConfig, ms};

/// 2000-01-01T00:00:00Z: nothing a running cluster reports is older.
pub const MIN_EVENT_MS: i64 = 946_684_800_000;
/// 2100-01-01T00:00:00Z: nothing is newer.
pub const MAX_EVENT_MS: i64 = 4_102_444_800_000;

/// The event time a cluster has reached.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ClusterClock {
    /// The cluster's clock: never goes back.
    newest_ms: Option<i64>,
    /// Newest event time per reporting node, and how many nodes are at
    /// each time, for [`ClusterClock::skew_bounded`] (counts, not names:
    /// most reports tie on the second, and ties of names cost a string
    /// comparison each).
    node_times: BTreeMap<Arc<str>, i64>,
    ranked: BTreeMap<i64, u32>,
    /// The last spell in which no node reported for longer than a
    /// heartbeat deadline while idle ticks moved the clock: (the newest
    /// report before it, the clock when a node was heard again).
    silent_spell: Option<(i64, i64)>,
}

impl ClusterClock {
    /// The cluster's clock; `None` until it has accepted an event.
    pub fn now(&self) -> Option<i64> {
        self.newest_ms
    }

    /// Whether an event at `time_ms` is plausible: within 2000..2100, and
    /// not further ahead of the clock than `max_future_skew_s`.
    pub fn check(&self, time_ms: i64, config: &DetectorConfig) -> Result<(), String> {
        if !(MIN_EVENT_MS..=MAX_EVENT_MS).contains(&time_ms) {
            return Err(format!("event time {time_ms} ms is outside 2000..2100"));
        }
        if let Some(newest) = self.newest_ms
            && time_ms > newest + ms(config.max_future_skew_s)
        {
            return Err(format!(
                "event time {time_ms} ms is {} s ahead of the cluster's newest record",
                (time_ms - newest) / 1000
            ));
        }
        Ok(())
    }

    /// Records that `node` reported `time_ms` and moves the clock.
    pub fn advance(&mut self, node: &str, time_ms: i64, config: &DetectorConfig) {
        if let (Some(heard), Some(now)) = (self.newest_reported(), self.newest_ms)
            && now - heard > ms(config.heartbeat_deadline_s)
            && time_ms > heard
            && self.silent_spell.is_none_or(|(_, ended)| now > ended)
        {
            // Every node was silent; one is heard again. Whoever else was
            // cut off with it may still be flushing what it queued.
            self.silent_spell = Some((heard, now));
        }
        match self.node_times.get_mut(node) {
            Some(t) if *t >= time_ms => return,
            Some(t) => {
                let before = std::mem::replace(t, time_ms);
                uncount(&mut self.ranked, before);
            }
            None => {
                self.node_times.insert(Arc::from(node), time_ms);
            }
        }
        *self.ranked.entry(time_ms).or_default() += 1;
        self.newest_ms = self.newest_ms.max(self.skew_bounded(config));
    }

    /// Stops counting `node` among the reporting nodes until it reports
    /// again (it was found lost).
    pub fn forget(&mut self, node: &str, config: &DetectorConfig) {
        if let Some(t) = self.node_times.remove(node) {
            uncount(&mut self.ranked, t);
            self.newest_ms = self.newest_ms.max(self.skew_bounded(config));
        }
    }

    /// While the cluster recovers from a spell of silence of every node
    /// (nodes heard again, but not yet for `resume_grace_s` beyond the
    /// spell's end), the newest report before the spell: silence after it
    /// is not yet evidence.
    pub fn recovering(&self, config: &DetectorConfig) -> Option<i64> {
        let (before, ended) = self.silent_spell?;
        let heard = self.newest_reported()?;
        // A new spell of silence is judged by `all_silent_grace_s`.
        let silent_again = self
            .newest_ms
            .is_some_and(|now| now - heard.max(ended) > ms(config.heartbeat_deadline_s));
        (heard < ended + ms(config.resume_grace_s) && !silent_again).then_some(before)
    }

    /// The newest event time a node (not lost) reported; `None` before any.
    pub fn newest_reported(&self) -> Option<i64> {
        self.ranked.last_key_value().map(|(t, _)| *t)
    }

    /// An idle tick: not a node's report, only the clock moves.
    pub fn tick(&mut self, time_ms: i64) {
        self.newest_ms = self.newest_ms.max(Some(time_ms));
    }

    /// The event time the cluster has reached. With three or more nodes
    /// that is the second newest node's time, so one node whose clock runs
    /// ahead cannot make every other node look silent; but never more than
    /// `max_clock_skew_s` behind the newest, so a cluster in which one node
    /// survives still sees the others go silent.
    fn skew_bounded(&self, config: &DetectorConfig) -> Option<i64> {
        let mut newest_first = self.ranked.iter().rev();
        let (&newest, &at_newest) = newest_first.next()?;
        if self.node_times.len() < 3 {
            return Some(newest);
        }
        let second = match at_newest {
            1 => newest_first.next().map_or(newest, |(t, _)| *t),
            _ => newest,
        };
        Some(second.max(newest - ms(config.max_clock_skew_s)))
    }
}

/// One node fewer at `time_ms`.
fn uncount(ranked: &mut BTreeMap<i64, u32>, time_ms: i64) {
    if let Some(n) = ranked.get_mut(&time_ms) {
        *n -= 1;
        if *n == 0 {
            ranked.remove(&time_ms);
        }
    }
}

/// How far one source partition has been read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct PartitionClock {
    newest_ms: Option<i64>,
    /// The highest offset read: only it says whether the partition is
    /// behind (a round applies its records in event-time order, not offset
    /// order).
    last_offset: Option<i64>,
    /// The consumer has unread records on it.
    behind: bool,
}

/// Per topic and partition: the newest event time read and whether the
/// consumer has caught up with it.
#[derive(Debug, Default)]
pub(super) struct SourceClocks {
    clocks: BTreeMap<String, BTreeMap<i32, PartitionClock>>,
    /// How many clocks are behind; none (in-order feeds, a consumer that
    /// keeps up) spares the timers the scan of a cluster's partitions.
    behind: usize,
}

impl SourceClocks {
    pub fn clear(&mut self) {
        self.clocks.clear();
        self.behind = 0;
    }

    /// A record of `source` was read, whose newest accepted event time is
    /// `accepted_ms`; `caught_up` when nothing newer was on its partition.
    pub fn read(&mut self, source: &SourceRecord, accepted_ms: Option<i64>, caught_up: bool) {
        let SourceRecord {
            topic, partition, ..
        } = source;
        let clock = match self.clocks.get_mut(topic) {
            Some(partitions) => partitions.entry(*partition).or_default(),
            None => self
                .clocks
                .entry(topic.clone())
                .or_default()
                .entry(*partition)
                .or_default(),
        };
        clock.newest_ms = clock.newest_ms.max(accepted_ms);
        if clock.last_offset.is_some_and(|last| source.offset < last) {
            return;
        }
        clock.last_offset = Some(source.offset);
        match (clock.behind, caught_up) {
            (false, false) => self.behind += 1,
            (true, true) => self.behind -= 1,
            _ => {}
        }
        clock.behind = !caught_up;
    }

    /// `partition` of `topic` was found read to its end after all.
    pub fn mark_caught_up(&mut self, topic: &str, partition: i32) {
        if let Some(clock) = self
            .clocks
            .get_mut(topic)
            .and_then(|c| c.get_mut(&partition))
            && clock.behind
        {
            clock.behind = false;
            self.behind -= 1;
        }
    }

    /// `partition` of `topic` was found to have unread records after its
    /// newest record read looked like its end: it holds the watermark back
    /// again, at the newest time read from it, until read to its end.
    pub fn mark_behind(&mut self, topic: &str, partition: i32) {
        if let Some(clock) = self
            .clocks
            .get_mut(topic)
            .and_then(|c| c.get_mut(&partition))
            && !clock.behind
        {
            clock.behind = true;
            self.behind += 1;
        }
    }

    /// Whether `partition` of `topic` holds the watermark back; `None` if
    /// nothing was read from it.
    pub fn is_behind(&self, topic: &str, partition: i32) -> Option<bool> {
        self.clocks
            .get(topic)
            .and_then(|c| c.get(&partition))
            .map(|clock| clock.behind)
    }

    /// Partitions whose latest record was read while more were known to be
    /// on them.
    pub fn behind_partitions(&self) -> Vec<(String, i32)> {
        if self.behind == 0 {
            return Vec::new();
        }
        self.clocks
            .iter()
            .flat_map(|(topic, partitions)| {
                partitions
                    .iter()
                    .filter(|(_, clock)| clock.behind)
                    .map(move |(p, _)| (topic.clone(), *p))
            })
            .collect()
    }

    /// How far the partition furthest behind trails in event time: the
    /// newest time read on any partition less the newest read on a
    /// partition that still has unread records; 0 when none has.
    pub fn delay_ms(&self) -> i64 {
        if self.behind == 0 {
            return 0;
        }
        let clocks = || self.clocks.values().flat_map(|p| p.values());
        let Some(newest) = clocks().filter_map(|c| c.newest_ms).max() else {
            return 0;
        };
        clocks()
            .filter(|c| c.behind)
            .filter_map(|c| c.newest_ms)
            .map(|t| newest - t)
            .max()
            .unwrap_or(0)
    }

    /// Whether every partition of `sources` (partitions by topic) has been
    /// read to its end.
    pub fn all_read(&self, sources: &BTreeMap<String, BTreeSet<i32>>) -> bool {
        sources.iter().all(|(topic, partitions)| {
            partitions.iter().all(|p| {
                !self
                    .clocks
                    .get(topic)
                    .and_then(|c| c.get(p))
                    .is_some_and(|clock| clock.behind)
            })
        })
    }

    /// The timers' watermark of a cluster whose clock reads `newest` and
    /// whose records come from `sources`: the clock, held back to the
    /// newest time every partition still being read has reached (a node
    /// whose heartbeats sit unread in a lagging partition is not silent,
    /// only behind), less the allowed lateness.
    pub fn watermark(
        &self,
        newest: i64,
        sources: &BTreeMap<String, BTreeSet<i32>>,
        config: &DetectorConfig,
    ) -> i64 {
        let behind = (self.behind > 0)
            .then(|| {
                sources
                    .iter()
                    .filter_map(|(topic, partitions)| {
                        self.clocks.get(topic).map(|c| (c, partitions))
                    })
                    .flat_map(|(c, partitions)| partitions.iter().filter_map(|p| c.get(p)))
                    .filter(|clock| clock.behind)
                    .filter_map(|clock| clock.newest_ms)
                    .min()
            })
            .flatten();
        behind.map_or(newest, |b| b.min(newest)) - ms(config.allowed_lateness_s)
    }
}
