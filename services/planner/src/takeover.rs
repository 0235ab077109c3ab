//! Taking over partitions exactly. When the group assigns this instance
//! input partitions, another instance may have decided on them since this
//! one last did (or this one never did). Rebuilding from the inputs in the
//! order this consumer happens to fetch three topics would give a different
//! state; the decision log records the order the previous owner applied
//! them in. So before reading on, for each assigned partition the planner:
//!
//! 1. reads the newest checkpoint of the partition (`checkpoint`) and, if it
//!    is ahead of the local store, makes it the local state;
//! 2. applies every decision recorded after it whose input the state does
//!    not reflect yet, in decision order (as replay does), reading the
//!    decisions and inputs after the checkpoint only;
//! 3. commits the state and offsets without publishing anything: those
//!    outputs are on the log already.
//!
//! Work is bounded by the checkpoint interval, not by history, and inputs
//! older than the checkpoint may have expired. Without a checkpoint it reads
//! the partition's decisions from the oldest retained.

use std::collections::{BTreeMap, BTreeSet};

use unicron_bus::BusError;
use unicron_bus::whole_topic::PartitionReader;
use unicron_codec::{AvroCodec, InboundRecord, KafkaConfig, PlannerInputs, Topic};
use unicron_core::planner::{Input, InputEvent, Planner};
use unicron_core::{Decision, PlannerCheckpoint};
use unicron_store::{Commit, Store};

use crate::checkpoint::Checkpoints;
use crate::error::PlannerError;
use crate::metrics::{
    CATCH_UP_DIVERGENCES, CAUGHT_UP_DECISIONS, CHECKPOINTS_REJECTED, CHECKPOINTS_RESTORED,
};
use crate::stored::{clusters_of, index_key, load_cluster, state_key};

/// Wanted chunk offsets this close are read in one run.
const CHUNK_GAP: i64 = 16;

/// The planner's input topics, full names, in `PlannerInputs::TOPICS` order.
fn input_topics(names: &unicron_codec::Topics) -> [String; 3] {
    PlannerInputs::TOPICS.map(|t| names.name(t).to_string())
}

/// A checkpoint read back: states and the input offsets they reflect.
#[derive(Debug)]
struct Restored {
    consumed: [i64; 3],
    decisions_next: i64,
    states: Vec<(String, Vec<u8>)>,
}

/// What a partition's takeover read from Kafka.
#[derive(Debug)]
struct History {
    partition: i32,
    /// The checkpoint, when it is ahead of the local store.
    restore: Option<Restored>,
    /// The decisions partition's high watermark when read.
    decisions_end: i64,
    /// Decisions to apply, with their inputs, in decision order.
    missed: Vec<(Input, Decision)>,
    /// Decisions whose input is no longer in the log.
    expired: u64,
    /// Every cluster with a decision read, applied or not: a store written
    /// before the partition index existed gets its clusters indexed.
    clusters: BTreeSet<String>,
}

/// Brings `planner` and `store` up to date on `partitions` and tells
/// `checkpoints` where each partition's decisions end.
pub async fn take_over(
    planner: &mut Planner,
    store: &Store,
    kafka: &KafkaConfig,
    brokers: &str,
    partitions: &BTreeSet<i32>,
    checkpoints: &mut Checkpoints,
) -> Result<(), PlannerError> {
    let names = unicron_codec::Topics::new(kafka);
    let inputs = input_topics(&names);
    let mut local = BTreeMap::new();
    for &p in partitions {
        let mut offsets = [0; 3];
        for (offset, topic) in offsets.iter_mut().zip(&inputs) {
            *offset = store.offset(topic, p)?.unwrap_or(0);
        }
        local.insert(p, offsets);
    }
    let (kafka, brokers) = (kafka.clone(), brokers.to_string());
    let histories = tokio::task::spawn_blocking(move || read_histories(&kafka, &brokers, &local))
        .await
        .map_err(|e| PlannerError::from(BusError::Internal(format!("takeover reader: {e}"))))??;
    for history in histories {
        apply(planner, store, &inputs, history, checkpoints)?;
    }
    Ok(())
}

fn read_histories(
    kafka: &KafkaConfig,
    brokers: &str,
    local: &BTreeMap<i32, [i64; 3]>,
) -> Result<Vec<History>, PlannerError> {
    let reader = PartitionReader::new(kafka, brokers)?;
    let names = unicron_codec::Topics::new(kafka);
    local
        .iter()
        .map(|(&p, local)| read_history(&reader, &names, p, *local))
        .collect()
}

fn read_history(
    reader: &PartitionReader,
    names: &unicron_codec::Topics,
    partition: i32,
    local: [i64; 3],
) -> Result<History, PlannerError> {
    let inputs = input_topics(names);
    let checkpoint = newest_checkpoint(
        reader,
        names.name(Topic::PlannerCheckpoints),
        partition,
        &inputs,
    )?;
    // The local store wins when it is at least as far: this instance held
    // the partition last, or took it over after the checkpoint.
    let local_is_ahead = |c: &Restored| c.consumed.iter().zip(&local).all(|(c, l)| l >= c);
    let (decisions_from, base, restore) = match checkpoint {
        Some(c) if local_is_ahead(&c) => (c.decisions_next, local, None),
        Some(c) => (c.decisions_next, c.consumed, Some(c)),
        None => (0, local, None),
    };
    let decisions_topic = names.name(Topic::Decisions);
    let (_, decisions_end) = reader.watermarks(decisions_topic, partition)?;
    let codec = AvroCodec::<Decision>::default();
    let mut seen = BTreeSet::new();
    let decisions: Vec<Decision> = reader
        .read(decisions_topic, partition, decisions_from, decisions_end)?
        .iter()
        .filter_map(|r| codec.decode(&r.payload).ok())
        .collect();
    let clusters = decisions.iter().map(|d| d.cluster.clone()).collect();
    let missed: Vec<Decision> = decisions
        .into_iter()
        .filter(|d| {
            let t = &d.trigger;
            t.partition == partition
                && inputs
                    .iter()
                    .position(|name| *name == t.topic)
                    .is_some_and(|i| t.offset >= base[i])
        })
        // A decision re-published after a crash is on the log twice.
        .filter(|d| seen.insert(d.id.clone()))
        .collect();
    let decoder = PlannerInputs::new(names.clone());
    let mut events: BTreeMap<(String, i64), InputEvent> = BTreeMap::new();
    for (i, topic) in inputs.iter().enumerate() {
        let Some(last) = missed
            .iter()
            .filter(|d| d.trigger.topic == *topic)
            .map(|d| d.trigger.offset)
            .max()
        else {
            continue;
        };
        for record in reader.read(topic, partition, base[i], last + 1)? {
            if let Some(Ok(event)) = decoder.decode(topic, &record.payload) {
                events.insert((record.topic, record.offset), event);
            }
        }
    }
    let mut expired = 0;
    let mut steps = Vec::with_capacity(missed.len());
    for decision in missed {
        let t = &decision.trigger;
        let Some(event) = events.remove(&(t.topic.clone(), t.offset)) else {
            expired += 1;
            continue;
        };
        steps.push((
            Input {
                topic: t.topic.clone(),
                partition,
                offset: t.offset,
                event,
            },
            decision,
        ));
    }
    Ok(History {
        partition,
        restore,
        decisions_end,
        missed: steps,
        expired,
        clusters,
    })
}

/// The newest complete checkpoint of `partition`: the last manifest whose
/// chunks are all still there. Chunks a crash left without a manifest after
/// it are skipped.
fn newest_checkpoint(
    reader: &PartitionReader,
    topic: &str,
    partition: i32,
    inputs: &[String; 3],
) -> Result<Option<Restored>, PlannerError> {
    let (low, high) = reader.watermarks(topic, partition)?;
    let codec = AvroCodec::<PlannerCheckpoint>::default();
    let decode = |r: &InboundRecord| codec.decode(&r.payload).ok();
    // Usually the last record is the manifest; look further back only
    // after a crash mid-checkpoint.
    let mut window = 1;
    let manifest = loop {
        let from = (high - window).max(low);
        let found = reader
            .read(topic, partition, from, high)?
            .iter()
            .rev()
            .find_map(|r| decode(r).and_then(|c| c.manifest));
        match found {
            Some(found) => break found,
            None if from <= low => return Ok(None),
            None => window *= 8,
        }
    };
    // Unchanged clusters' chunks may be from older checkpoints: read the
    // runs of offsets that are wanted, not everything since the oldest.
    let wanted: BTreeSet<i64> = manifest
        .clusters
        .iter()
        .flat_map(|c| c.chunk_offsets.iter().copied())
        .collect();
    let mut chunks: BTreeMap<i64, PlannerCheckpoint> = BTreeMap::new();
    let mut run: Option<(i64, i64)> = None;
    for offset in wanted.iter().copied().chain([i64::MAX]) {
        match run {
            Some((from, to)) if offset <= to + CHUNK_GAP => run = Some((from, offset)),
            _ => {
                if let Some((from, to)) = run {
                    for r in reader.read(topic, partition, from, to + 1)? {
                        if wanted.contains(&r.offset)
                            && let Some(chunk) = decode(&r)
                        {
                            chunks.insert(r.offset, chunk);
                        }
                    }
                }
                run = Some((offset, offset));
            }
        }
    }
    let mut states = Vec::with_capacity(manifest.clusters.len());
    for cluster in &manifest.clusters {
        let mut state = Vec::new();
        for offset in &cluster.chunk_offsets {
            match chunks.get(offset) {
                Some(chunk) if chunk.cluster == cluster.cluster => {
                    state.extend_from_slice(&chunk.state);
                }
                _ => {
                    tracing::warn!(
                        partition,
                        cluster = %cluster.cluster,
                        offset,
                        "checkpoint: a state chunk is gone (retention?); not using the checkpoint"
                    );
                    return Ok(None);
                }
            }
        }
        // Decoded and checked before anything is stored: a chunk that is
        // not a plannable state must not reach the store, where every later
        // start would trip on it.
        if let Err(reason) = check_state(&cluster.cluster, &state) {
            tracing::warn!(
                partition,
                cluster = %cluster.cluster,
                %reason,
                "checkpoint: a cluster's state is not valid; not using the checkpoint"
            );
            ::metrics::counter!(CHECKPOINTS_REJECTED.name).increment(1);
            return Ok(None);
        }
        states.push((cluster.cluster.clone(), state));
    }
    Ok(Some(restored(&manifest, inputs, states)))
}

/// Whether `bytes` are a state of `cluster` the planner can plan with.
fn check_state(cluster: &str, bytes: &[u8]) -> Result<(), String> {
    let state: unicron_core::planner::ClusterState =
        serde_json::from_slice(bytes).map_err(|e| format!("does not parse: {e}"))?;
    if state.id != cluster {
        return Err(format!("holds cluster {:?}, not {cluster:?}", state.id));
    }
    state.validate()
}

fn restored(
    manifest: &unicron_core::CheckpointManifest,
    inputs: &[String; 3],
    states: Vec<(String, Vec<u8>)>,
) -> Restored {
    let mut consumed = [0; 3];
    for (slot, topic) in consumed.iter_mut().zip(inputs) {
        *slot = manifest
            .consumed
            .iter()
            .find(|c| c.topic == *topic)
            .map_or(0, |c| c.next_offset);
    }
    Restored {
        consumed,
        decisions_next: manifest.decisions_next_offset,
        states,
    }
}

fn apply(
    planner: &mut Planner,
    store: &Store,
    inputs: &[String; 3],
    history: History,
    checkpoints: &mut Checkpoints,
) -> Result<(), PlannerError> {
    let p = history.partition;
    if let Some(restore) = &history.restore {
        // Clusters of the partition only the local store has stay: a
        // checkpoint lists every cluster its writer knew of.
        let mut commit = Commit::new();
        for (cluster, state) in &restore.states {
            commit.put_state(state_key(cluster), state.clone());
            commit.put_state(index_key(p, cluster), Vec::new());
        }
        for (topic, next) in inputs.iter().zip(restore.consumed) {
            commit.consumed(topic, p, next);
        }
        store.commit(commit)?;
        ::metrics::counter!(CHECKPOINTS_RESTORED.name).increment(1);
    }
    let mut commit = Commit::new();
    let indexed: BTreeSet<String> = clusters_of(store, p)?.into_iter().collect();
    for cluster in history.clusters.difference(&indexed) {
        if store.state(&state_key(cluster))?.is_some() {
            commit.put_state(index_key(p, cluster), Vec::new());
        }
    }
    let mut clusters = BTreeSet::new();
    for (input, decision) in &history.missed {
        load_cluster(planner, |key| store.state(key), &decision.cluster)?;
        clusters.insert(decision.cluster.clone());
        commit.consumed(&input.topic, p, input.offset + 1);
    }
    let outcome = unicron_core::replay::catch_up(planner, &history.missed);
    for cluster in &clusters {
        if let Some(state) = planner.cluster(cluster) {
            commit.put_state(
                state_key(cluster),
                serde_json::to_vec(state).expect("state serialises"),
            );
            commit.put_state(index_key(p, cluster), Vec::new());
        }
    }
    if !commit.is_empty() {
        store.commit(commit)?;
    }
    checkpoints.taken_over(p, history.decisions_end, outcome.applied);
    ::metrics::counter!(CAUGHT_UP_DECISIONS.name).increment(outcome.applied);
    if history.expired > 0 {
        tracing::warn!(
            partition = p,
            expired = history.expired,
            "takeover: decisions whose input is no longer in the log (no checkpoint covers them)"
        );
    }
    if outcome.diverged > 0 {
        ::metrics::counter!(CATCH_UP_DIVERGENCES.name).increment(outcome.diverged);
        tracing::error!(
            partition = p,
            diverged = outcome.diverged,
            first = ?outcome.first_divergence,
            "takeover: decisions of another instance not reproduced; is its policy or configuration different?"
        );
    }
    tracing::info!(
        partition = p,
        checkpoint = history.restore.is_some(),
        applied = outcome.applied,
        clusters = clusters.len(),
        "took over partition"
    );
    Ok(())
}
