//! Taking over partitions exactly. When the group assigns this instance
//! input partitions, another instance may have decided on them since this
//! one last did (or this one never did). Rebuilding from the inputs in the
//! order this consumer happens to fetch three topics would give a different
//! state; the decision log records the order the previous owner applied
//! them in. So before reading on, the planner applies every recorded
//! decision's input it has not applied yet, in decision order (as replay
//! does), and commits the state and offsets without publishing anything:
//! those outputs are on the log already.

use std::collections::{BTreeMap, BTreeSet};

use unicron_bus::history::read_topic;
use unicron_bus::{BusError, KafkaConfig, Topic};
use unicron_core::Decision;
use unicron_core::planner::{Input, InputEvent, Planner};
use unicron_store::{Commit, Store};

use crate::error::PlannerError;
use crate::service::{Topics, load_cluster, state_key};

/// Catches `planner` up on the input partitions in `assigned` and commits
/// the result. Returns the number of decisions applied.
pub async fn catch_up(
    planner: &mut Planner,
    store: &Store,
    kafka: &KafkaConfig,
    brokers: &str,
    topics: &Topics,
    assigned: &[(String, i32)],
) -> Result<u64, PlannerError> {
    let inputs = unicron_bus::PlannerInputs::TOPICS.map(|t| topics.names.name(t));
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (topic, partition) in assigned {
        if inputs.contains(&topic.as_str()) {
            let stored = store.offset(topic, *partition)?.unwrap_or(0);
            next.insert((topic.clone(), *partition), stored);
        }
    }
    if next.is_empty() {
        return Ok(0);
    }
    let decisions = read(kafka, brokers, topics.names.name(Topic::Decisions)).await?;
    let mut seen = BTreeSet::new();
    let missed: Vec<Decision> = decisions
        .iter()
        .filter_map(|r| topics.decision.decode(&r.payload).ok())
        .filter(|d| {
            let t = &d.trigger;
            next.get(&(t.topic.clone(), t.partition))
                .is_some_and(|&from| t.offset >= from)
        })
        // A decision re-published after a crash is on the log twice.
        .filter(|d| seen.insert(d.id.clone()))
        .collect();
    if missed.is_empty() {
        return Ok(0);
    }
    let wanted: BTreeSet<&str> = missed.iter().map(|d| d.trigger.topic.as_str()).collect();
    let mut events: BTreeMap<(String, i32, i64), InputEvent> = BTreeMap::new();
    for topic in wanted {
        for record in read(kafka, brokers, topic).await? {
            if let Some(Ok(event)) = topics.inputs.decode(topic, &record.payload) {
                events.insert((record.topic, record.partition, record.offset), event);
            }
        }
    }
    let mut steps = Vec::with_capacity(missed.len());
    let mut commit = Commit::new();
    let mut clusters = BTreeSet::new();
    for decision in missed {
        let t = &decision.trigger;
        let Some(event) = events.remove(&(t.topic.clone(), t.partition, t.offset)) else {
            // Out of retention: nothing to apply; the state cannot include it.
            tracing::warn!(decision = %decision.id, "catch-up: trigger no longer in the log");
            continue;
        };
        load_cluster(planner, |key| store.state(key), &decision.cluster)?;
        clusters.insert(decision.cluster.clone());
        commit.consumed(&t.topic, t.partition, t.offset + 1);
        steps.push((
            Input {
                topic: t.topic.clone(),
                partition: t.partition,
                offset: t.offset,
                event,
            },
            decision,
        ));
    }
    let outcome = unicron_core::replay::catch_up(planner, &steps);
    for cluster in &clusters {
        if let Some(state) = planner.cluster(cluster) {
            commit.put_state(
                state_key(cluster),
                serde_json::to_vec(state).expect("state serialises"),
            );
        }
    }
    store.commit(commit)?;
    metrics::counter!("unicron_planner_caught_up_decisions_total").increment(outcome.applied);
    if outcome.diverged > 0 {
        metrics::counter!("unicron_planner_catch_up_divergences_total").increment(outcome.diverged);
        tracing::error!(
            diverged = outcome.diverged,
            first = ?outcome.first_divergence,
            "catch-up: decisions of another instance not reproduced; is its policy or configuration different?"
        );
    }
    tracing::info!(
        applied = outcome.applied,
        clusters = clusters.len(),
        "caught up with decisions taken by another instance"
    );
    Ok(outcome.applied)
}

async fn read(
    kafka: &KafkaConfig,
    brokers: &str,
    topic: &str,
) -> Result<Vec<unicron_bus::InboundRecord>, PlannerError> {
    let (kafka, brokers, topic) = (kafka.clone(), brokers.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || read_topic(&kafka, &brokers, &topic))
        .await
        .map_err(|e| PlannerError::from(BusError::Internal(format!("history reader: {e}"))))?
        .map_err(PlannerError::from)
}
