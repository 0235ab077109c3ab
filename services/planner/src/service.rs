//! The planner's consume → decide → commit → publish loop.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use unicron_bus::consumer::InboundRecord;
use unicron_bus::resume::ResumeContext;
use unicron_bus::{AvroCodec, BusError, Consumer, DecodeError, KafkaConfig, Producer};
use unicron_core::planner::{ClusterState, Input, InputEvent, Output, Planner};
use unicron_core::signing::CommandSigner;
use unicron_core::{ClusterEvent, Command, CommandResult, DeadLetter, Decision, FailureEvent};
use unicron_store::{Commit, OutboxEntry, Store, StoreError, StoreOptions};

use crate::settings::PlannerSettings;

const SERVICE: &str = "planner";

/// Errors that stop the planner. Bad records never do: they are dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum PlannerError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("stored state of cluster {cluster} is unreadable: {reason}")]
    CorruptState { cluster: String, reason: String },
}

/// Topic names and codecs of the planner's inputs and outputs.
pub(crate) struct Topics {
    pub failures: String,
    pub cluster: String,
    pub results: String,
    pub decisions: String,
    pub commands: String,
    pub dlq: String,
    pub max_record_bytes: usize,
    pub dlq_payload_bytes: usize,
}

pub(crate) struct Codecs {
    pub failure: AvroCodec<FailureEvent>,
    pub cluster: AvroCodec<ClusterEvent>,
    pub result: AvroCodec<CommandResult>,
    pub decision: AvroCodec<Decision>,
    pub command: AvroCodec<Command>,
    pub dead_letter: AvroCodec<DeadLetter>,
}

pub(crate) fn state_key(cluster: &str) -> Vec<u8> {
    format!("cluster/{cluster}").into_bytes()
}

/// Loads `cluster`'s stored state into `planner` unless it has it already.
pub(crate) fn load_cluster(
    planner: &mut Planner,
    store: &Store,
    cluster: &str,
) -> Result<(), PlannerError> {
    if cluster.is_empty() || planner.cluster(cluster).is_some() {
        return Ok(());
    }
    if let Some(bytes) = store.state(&state_key(cluster))? {
        let state: ClusterState =
            serde_json::from_slice(&bytes).map_err(|e| PlannerError::CorruptState {
                cluster: cluster.to_string(),
                reason: e.to_string(),
            })?;
        planner.restore(state);
    }
    Ok(())
}

/// Runs the planner until `shutdown` completes or an unrecoverable error.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: &PlannerSettings,
    signer: CommandSigner,
    shutdown: impl Future<Output = ()>,
) -> Result<(), PlannerError> {
    let topics = Topics {
        failures: kafka.topic("failures"),
        cluster: kafka.topic("cluster"),
        results: kafka.topic("command-results"),
        decisions: kafka.topic("decisions"),
        commands: kafka.topic("commands"),
        dlq: kafka.topic("dlq"),
        max_record_bytes: kafka.max_record_bytes,
        dlq_payload_bytes: kafka.dlq_payload_bytes,
    };
    let codecs = Codecs {
        failure: AvroCodec::default(),
        cluster: AvroCodec::default(),
        result: AvroCodec::default(),
        decision: AvroCodec::default(),
        command: AvroCodec::default(),
        dead_letter: AvroCodec::default(),
    };
    describe_metrics();
    unicron_bus::metrics::register(SERVICE);
    let store = Arc::new(Store::open(
        &settings.state_dir,
        StoreOptions {
            sync: settings.sync_writes,
        },
    )?);
    let producer = Producer::new(kafka, brokers)?;
    // Whatever a crash left unpublished goes out first.
    drain(&store, &producer).await?;

    let lookup = store.clone();
    let (context, assignment) = ResumeContext::new(Box::new(move |topic, partition| {
        lookup.offset(topic, partition).ok().flatten()
    }));
    let consumer = Consumer::with_context(kafka, brokers, &settings.group_id, context)?;
    consumer.subscribe(&[&topics.failures, &topics.cluster, &topics.results])?;
    tracing::info!(group = %settings.group_id, state_dir = %settings.state_dir.display(), "planner running");

    let mut planner = Planner::new(settings.tuning.clone(), signer.clone());
    let mut generation = 0;
    // Ready while this loop runs; not ready once it ends, however it ends.
    let _ready = unicron_bus::metrics::ReadyGuard::new(SERVICE);
    tokio::pin!(shutdown);
    loop {
        let record = tokio::select! {
            record = consumer.recv() => record?,
            () = &mut shutdown => break,
        };
        tracing::debug!(topic = %record.topic, partition = record.partition, offset = record.offset, "received");
        let (current, assigned) = {
            let assignment = assignment.lock().unwrap_or_else(|e| e.into_inner());
            let assigned: Vec<(String, i32)> = assignment.partitions.keys().cloned().collect();
            (assignment.generation, assigned)
        };
        if current != generation {
            // Partitions moved: cached clusters may be stale; reload them
            // lazily, after applying what other instances decided meanwhile.
            planner = Planner::new(settings.tuning.clone(), signer.clone());
            generation = current;
            crate::catch_up::catch_up(
                &mut planner,
                &store,
                kafka,
                brokers,
                &topics,
                &codecs,
                &assigned,
            )
            .await?;
        }
        if store
            .offset(&record.topic, record.partition)?
            .is_some_and(|next| record.offset < next)
        {
            continue; // applied before a restart or rebalance
        }
        let commit = step(&mut planner, &store, &topics, &codecs, &record)?;
        store.commit(commit)?;
        drain(&store, &producer).await?;
        consumer.mark_done(&record)?;
    }
    consumer.commit_now()?;
    tracing::info!("planner stopped");
    Ok(())
}

/// Decodes one record, applies it, and returns everything to commit.
fn step(
    planner: &mut Planner,
    store: &Store,
    topics: &Topics,
    codecs: &Codecs,
    record: &InboundRecord,
) -> Result<Commit, PlannerError> {
    let mut commit = Commit::new();
    commit.consumed(&record.topic, record.partition, record.offset + 1);
    let event = match decode(topics, codecs, record) {
        Ok(event) => event,
        Err(error) => {
            dead_letter(&mut commit, topics, codecs, record, &error.to_string())?;
            return Ok(commit);
        }
    };
    let cluster = event.cluster().to_string();
    load_cluster(planner, store, &cluster)?;
    let input = Input {
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        event,
    };
    let started = Instant::now();
    let outputs = planner.apply(&input);
    metrics::histogram!("unicron_planner_decision_seconds").record(started.elapsed().as_secs_f64());
    for output in outputs {
        match output {
            Output::Rejected(reason) => {
                dead_letter(&mut commit, topics, codecs, record, &reason)?;
                return Ok(commit);
            }
            Output::Decision(decision) => {
                if let Some(chosen) = decision
                    .chosen_index
                    .and_then(|i| decision.alternatives.get(i as usize))
                {
                    metrics::gauge!("unicron_planner_waf", "cluster" => cluster.clone())
                        .set(chosen.waf);
                }
                metrics::counter!("unicron_planner_decisions_total", "cluster" => cluster.clone())
                    .increment(1);
                commit.publish(OutboxEntry {
                    topic: topics.decisions.clone(),
                    key: cluster.clone().into_bytes(),
                    payload: codecs.decision.encode(&decision)?,
                });
            }
            Output::Command(command) => {
                metrics::counter!("unicron_planner_commands_total", "action" => command.action.symbol())
                    .increment(1);
                commit.publish(OutboxEntry {
                    topic: topics.commands.clone(),
                    key: cluster.clone().into_bytes(),
                    payload: codecs.command.encode(&command)?,
                });
            }
        }
    }
    let state = planner.cluster(&cluster).expect("apply created it");
    commit.put_state(
        state_key(&cluster),
        serde_json::to_vec(state).expect("state serialises"),
    );
    Ok(commit)
}

fn decode(
    topics: &Topics,
    codecs: &Codecs,
    record: &InboundRecord,
) -> Result<InputEvent, DecodeError> {
    if record.payload.len() > topics.max_record_bytes {
        return Err(DecodeError::Oversized {
            size: record.payload.len(),
            limit: topics.max_record_bytes,
        });
    }
    decode_input(topics, codecs, &record.topic, &record.payload)
}

/// A planner input by its topic: a failure, a cluster event or a result.
pub(crate) fn decode_input(
    topics: &Topics,
    codecs: &Codecs,
    topic: &str,
    payload: &[u8],
) -> Result<InputEvent, DecodeError> {
    if topic == topics.failures {
        codecs.failure.decode(payload).map(InputEvent::Failure)
    } else if topic == topics.cluster {
        codecs.cluster.decode(payload).map(InputEvent::Cluster)
    } else {
        codecs.result.decode(payload).map(InputEvent::Result)
    }
}

fn dead_letter(
    commit: &mut Commit,
    topics: &Topics,
    codecs: &Codecs,
    record: &InboundRecord,
    reason: &str,
) -> Result<(), PlannerError> {
    let (key, payload) = unicron_bus::dlq::encode_dead_letter(
        record,
        reason,
        SERVICE,
        topics.dlq_payload_bytes,
        &codecs.dead_letter,
    )?;
    commit.publish(OutboxEntry {
        topic: topics.dlq.clone(),
        key,
        payload,
    });
    Ok(())
}

/// Publishes pending outbox entries in order, removing each once acknowledged.
async fn drain(store: &Store, producer: &Producer) -> Result<(), PlannerError> {
    for (key, entry) in store.outbox()? {
        producer
            .send_bytes(&entry.topic, &entry.key, &entry.payload)
            .await?;
        store.outbox_delivered(key)?;
    }
    Ok(())
}

fn describe_metrics() {
    metrics::describe_histogram!(
        "unicron_planner_decision_seconds",
        "Time to apply one input and decide, seconds."
    );
    metrics::describe_counter!(
        "unicron_planner_decisions_total",
        "Decisions taken, by cluster."
    );
    metrics::describe_counter!(
        "unicron_planner_commands_total",
        "Commands issued, by action."
    );
    metrics::describe_counter!(
        "unicron_planner_caught_up_decisions_total",
        "Decisions of other instances applied when taking over partitions."
    );
    metrics::describe_counter!(
        "unicron_planner_catch_up_divergences_total",
        "Decisions of other instances this instance did not reproduce (policy or configuration differ)."
    );
    metrics::describe_gauge!(
        "unicron_planner_waf",
        "WAF of the chosen plan, by cluster (weighted FLOP/s)."
    );
}
