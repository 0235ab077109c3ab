//! Writing checkpoints. For each input partition it holds, the planner
//! writes the stored state of every cluster of the partition to the
//! checkpoint topic's partition of the same number, then a manifest naming
//! where each state is and which input and decision offsets the states
//! reflect. A planner taking the partition over starts from the newest
//! manifest (`takeover`), so takeover work is bounded by the checkpoint
//! interval, not by history, and old inputs may expire.
//!
//! A checkpoint is taken between two records, after the last one's outputs
//! are published, so the store holds one consistent point and every
//! decision before it has an offset. Records go out through the runtime's
//! `published` hook: chunks first, then, once their offsets are known, the
//! manifest. A crash in between leaves chunks without a manifest, which
//! readers skip; the previous manifest still holds.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use unicron_codec::AvroCodec;
use unicron_core::{CheckpointManifest, CheckpointedCluster, ConsumedOffset, PlannerCheckpoint};
use unicron_runtime::{Outgoing, Published};
use unicron_store::Store;

use crate::error::PlannerError;
use crate::metrics::CHECKPOINTS;
use crate::stored::{clusters_of, state_key};

/// Room left in a record for everything but the state chunk.
const RECORD_OVERHEAD: usize = 64 * 1024;

/// Names of the topics a checkpoint involves.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointTopics {
    pub checkpoints: String,
    pub decisions: String,
    pub inputs: [String; 3],
}

/// When to checkpoint.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cadence {
    pub every_decisions: u64,
    pub full_every: Duration,
    pub max_record_bytes: usize,
}

/// The checkpoint writer of every held partition.
pub(crate) struct Checkpoints {
    topics: CheckpointTopics,
    cadence: Cadence,
    codec: AvroCodec<PlannerCheckpoint>,
    partitions: BTreeMap<i32, Partition>,
}

/// What the writer knows of one held partition.
#[derive(Debug, Default)]
struct Partition {
    /// The decisions partition's next offset after every decision taken so
    /// far; unknown until one is published or a takeover reads the end.
    decisions_next: Option<i64>,
    /// Decisions since the last manifest.
    since: u64,
    /// Clusters changed since their chunks were written.
    dirty: BTreeSet<String>,
    /// Where the last manifest says each cluster's chunks are.
    chunks: BTreeMap<String, Vec<i64>>,
    /// When the last whole checkpoint was written; `None`: not by this
    /// owner, so the next one is whole.
    full_at: Option<Instant>,
    writing: Option<Writing>,
}

/// A checkpoint being written.
#[derive(Debug)]
struct Writing {
    full: bool,
    /// The cluster of each chunk sent, in order, awaiting offsets.
    pending: Vec<String>,
    chunks: BTreeMap<String, Vec<i64>>,
    consumed: Vec<ConsumedOffset>,
    decisions_next: i64,
    manifest_sent: bool,
}

impl Checkpoints {
    pub fn new(topics: CheckpointTopics, cadence: Cadence) -> Checkpoints {
        Checkpoints {
            topics,
            cadence,
            codec: AvroCodec::default(),
            partitions: BTreeMap::new(),
        }
    }

    /// Partitions moved: forget the ones no longer held.
    pub fn retain(&mut self, held: &BTreeSet<i32>) {
        self.partitions.retain(|p, _| held.contains(p));
    }

    /// A takeover of `partition` read the decisions partition up to
    /// `decisions_next` and replayed `replayed` decisions past the checkpoint.
    pub fn taken_over(&mut self, partition: i32, decisions_next: i64, replayed: u64) {
        self.partitions.insert(
            partition,
            Partition {
                decisions_next: Some(decisions_next),
                since: replayed,
                ..Partition::default()
            },
        );
    }

    /// `cluster`'s stored state changed.
    pub fn changed(&mut self, partition: i32, cluster: &str) {
        if let Some(part) = self.partitions.get_mut(&partition)
            && !part.dirty.contains(cluster)
        {
            part.dirty.insert(cluster.to_string());
        }
    }

    /// Takes note of where outputs landed and returns what to send next:
    /// a new checkpoint's chunks, or the manifest once they have offsets.
    pub fn published(
        &mut self,
        published: &[Published],
        store: &Store,
        now: Instant,
    ) -> Result<Vec<Outgoing>, PlannerError> {
        for at in published {
            if at.topic == self.topics.decisions {
                // Only held partitions: at start the outbox may drain
                // decisions of partitions the group has not given us yet.
                if let Some(part) = self.partitions.get_mut(&at.partition) {
                    part.decisions_next = Some(at.offset + 1);
                    part.since += 1;
                }
            } else if at.topic == self.topics.checkpoints
                && let Some(part) = self.partitions.get_mut(&at.partition)
                && let Some(writing) = &mut part.writing
            {
                if writing.pending.is_empty() {
                    // The manifest: the checkpoint holds from now on.
                    let writing = part.writing.take().expect("checked");
                    part.since = 0;
                    if writing.full {
                        part.full_at = Some(now);
                    }
                    part.chunks = writing.chunks;
                    ::metrics::counter!(CHECKPOINTS.name).increment(1);
                } else {
                    let cluster = writing.pending.remove(0);
                    writing.chunks.entry(cluster).or_default().push(at.offset);
                }
            }
        }
        let mut out = Vec::new();
        let due: Vec<i32> = self
            .partitions
            .iter()
            .filter(|(_, part)| self.due(part, now))
            .map(|(p, _)| *p)
            .collect();
        for partition in due {
            out.extend(self.start(partition, store, now)?);
        }
        for (partition, part) in &mut self.partitions {
            if let Some(writing) = &mut part.writing
                && writing.pending.is_empty()
                && !writing.manifest_sent
            {
                writing.manifest_sent = true;
                out.push(manifest(&self.codec, &self.topics, *partition, writing)?);
            }
        }
        Ok(out)
    }

    fn due(&self, part: &Partition, now: Instant) -> bool {
        part.writing.is_none()
            && part.decisions_next.is_some()
            && (part.since >= self.cadence.every_decisions
                || part
                    .full_at
                    .is_none_or(|at| now.duration_since(at) >= self.cadence.full_every))
    }

    /// Starts a checkpoint of `partition`: the chunks of every cluster
    /// changed since the last one (of all, when whole).
    fn start(
        &mut self,
        partition: i32,
        store: &Store,
        now: Instant,
    ) -> Result<Vec<Outgoing>, PlannerError> {
        let part = self.partitions.get_mut(&partition).expect("due");
        let full = part
            .full_at
            .is_none_or(|at| now.duration_since(at) >= self.cadence.full_every);
        let mut consumed = Vec::with_capacity(self.topics.inputs.len());
        for topic in &self.topics.inputs {
            consumed.push(ConsumedOffset {
                topic: topic.clone(),
                next_offset: store.offset(topic, partition)?.unwrap_or(0),
            });
        }
        let mut writing = Writing {
            full,
            pending: Vec::new(),
            chunks: BTreeMap::new(),
            consumed,
            decisions_next: part.decisions_next.expect("due"),
            manifest_sent: false,
        };
        let chunk_bytes = self
            .cadence
            .max_record_bytes
            .saturating_sub(RECORD_OVERHEAD)
            .max(1024);
        let mut out = Vec::new();
        for cluster in clusters_of(store, partition)? {
            let unchanged = part
                .chunks
                .get(&cluster)
                .filter(|_| !full && !part.dirty.contains(&cluster));
            if let Some(offsets) = unchanged {
                writing.chunks.insert(cluster, offsets.clone());
                continue;
            }
            let Some(state) = store.state(&state_key(&cluster))? else {
                continue;
            };
            for chunk in state.chunks(chunk_bytes) {
                let record = PlannerCheckpoint {
                    input_partition: partition,
                    cluster: cluster.clone(),
                    state: chunk.to_vec(),
                    manifest: None,
                };
                out.push(Outgoing {
                    topic: self.topics.checkpoints.clone(),
                    partition: Some(partition),
                    key: cluster.as_bytes().to_vec(),
                    payload: self.codec.encode(&record)?,
                });
                writing.pending.push(cluster.clone());
            }
        }
        part.dirty.clear();
        part.writing = Some(writing);
        Ok(out)
    }
}

fn manifest(
    codec: &AvroCodec<PlannerCheckpoint>,
    topics: &CheckpointTopics,
    partition: i32,
    writing: &Writing,
) -> Result<Outgoing, PlannerError> {
    let record = PlannerCheckpoint {
        input_partition: partition,
        cluster: String::new(),
        state: Vec::new(),
        manifest: Some(CheckpointManifest {
            consumed: writing.consumed.clone(),
            decisions_next_offset: writing.decisions_next,
            clusters: writing
                .chunks
                .iter()
                .map(|(cluster, offsets)| CheckpointedCluster {
                    cluster: cluster.clone(),
                    chunk_offsets: offsets.clone(),
                })
                .collect(),
        }),
    };
    Ok(Outgoing {
        topic: topics.checkpoints.clone(),
        partition: Some(partition),
        key: Vec::new(),
        payload: codec.encode(&record)?,
    })
}
