//! The planner's step: a failure, cluster event or command result in;
//! decisions and signed commands out, with the cluster's state. The
//! runtime (unicron-runtime) does the rest.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use unicron_codec::{DecodeError, InboundRecord, KafkaConfig, PlannerInputs, Subscription, Topic};
use unicron_core::planner::{Input, InputEvent, Output, Planner};
use unicron_core::signing::CommandSigner;
use unicron_runtime::{
    Applied, Durability, Never, Outgoing, Processor, Published, RuntimeOptions, StartFrom, Step,
};
use unicron_store::{Store, StoreOptions};

use crate::checkpoint::{Cadence, CheckpointTopics, Checkpoints};
use crate::error::PlannerError;
use crate::metrics::{COMMANDS, DECISION_SECONDS, DECISIONS, METRICS, WAF};
use crate::settings::PlannerSettings;
use crate::stored::{index_key, load_cluster, state_key};

const SERVICE: &str = "planner";

/// How often an idle planner looks for a checkpoint due by time.
const CHECKPOINT_CHECK: Duration = Duration::from_secs(60);

/// How the planner reads its inputs (its outputs go by record type).
pub(crate) struct Topics {
    pub names: unicron_codec::Topics,
    pub inputs: PlannerInputs,
}

impl Topics {
    fn new(kafka: &KafkaConfig) -> Topics {
        let names = unicron_codec::Topics::new(kafka);
        Topics {
            inputs: PlannerInputs::new(names.clone()),
            names,
        }
    }

    /// A planner input by its topic (full name).
    pub fn decode(&self, topic: &str, payload: &[u8]) -> Result<InputEvent, DecodeError> {
        self.inputs.decode(topic, payload).unwrap_or_else(|| {
            Err(DecodeError::Invalid {
                record: "planner input",
                reason: format!("{topic} is not an input of the planner"),
            })
        })
    }
}

/// Runs the planner until `shutdown` completes or an unrecoverable error.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: &PlannerSettings,
    signer: CommandSigner,
    shutdown: impl Future<Output = ()>,
) -> Result<(), PlannerError> {
    settings.validate()?;
    let topics = Topics::new(kafka);
    let checkpoints = Checkpoints::new(
        CheckpointTopics {
            checkpoints: topics.names.name(Topic::PlannerCheckpoints).to_string(),
            decisions: topics.names.name(Topic::Decisions).to_string(),
            inputs: PlannerInputs::TOPICS.map(|t| topics.names.name(t).to_string()),
        },
        Cadence {
            every_decisions: settings.checkpoint_every_decisions,
            full_every: Duration::from_secs_f64(settings.checkpoint_full_every_s),
            max_record_bytes: kafka.max_record_bytes,
        },
    );
    let store = Arc::new(Store::open(
        &settings.state_dir,
        StoreOptions {
            sync: settings.sync_writes,
        },
    )?);
    let options = RuntimeOptions::new(
        SERVICE,
        &settings.group_id,
        PlannerInputs::TOPICS
            .into_iter()
            .map(Subscription::Topic)
            .collect(),
        Durability::Store {
            store: store.clone(),
            start: StartFrom::StoredOffsets,
        },
    );
    let mut processor = PlannerProcessor {
        store,
        planner: Planner::new(settings.tuning.clone(), signer.clone()),
        settings: settings.clone(),
        signer,
        kafka: kafka.clone(),
        brokers: brokers.to_string(),
        topics,
        checkpoints,
        indexed: BTreeSet::new(),
    };
    tracing::info!(group = %settings.group_id, state_dir = %settings.state_dir.display(), "planner starting");
    unicron_runtime::run(kafka, brokers, &options, &mut processor, shutdown).await
}

struct PlannerProcessor {
    /// The store the runtime commits to; read on takeover and checkpoints.
    store: Arc<Store>,
    planner: Planner,
    settings: PlannerSettings,
    signer: CommandSigner,
    kafka: KafkaConfig,
    brokers: String,
    topics: Topics,
    checkpoints: Checkpoints,
    /// (input partition, cluster) pairs known to be in the store's index.
    indexed: BTreeSet<(i32, String)>,
}

impl Processor for PlannerProcessor {
    type Input = InputEvent;
    type Action = Never;
    type Error = PlannerError;

    fn decode(&self, record: &InboundRecord) -> Result<InputEvent, DecodeError> {
        self.topics.decode(&record.topic, &record.payload)
    }

    fn apply(
        &mut self,
        event: InputEvent,
        step: &mut Step<'_>,
    ) -> Result<Applied<Never>, PlannerError> {
        let cluster = event.cluster().to_string();
        load_cluster(&mut self.planner, |key| step.state(key), &cluster)?;
        let record = step.record();
        let input = Input {
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            event,
        };
        let started = Instant::now();
        let outputs = self.planner.apply(&input);
        ::metrics::histogram!(DECISION_SECONDS.name).record(started.elapsed().as_secs_f64());
        for output in outputs {
            match output {
                Output::Rejected(reason) => {
                    step.dead_letter(reason);
                    return Ok(Applied::Done);
                }
                Output::Decision(decision) => {
                    if let Some(chosen) = decision
                        .chosen_index
                        .and_then(|i| decision.alternatives.get(i as usize))
                    {
                        ::metrics::gauge!(WAF.name, "cluster" => cluster.clone()).set(chosen.waf);
                    }
                    ::metrics::counter!(DECISIONS.name, "cluster" => cluster.clone()).increment(1);
                    // The partition of the input, not the key's hash: a
                    // takeover reads one decisions partition per input
                    // partition, whatever partitioner the producers used.
                    step.send_to(Some(record.partition), cluster.as_bytes(), &decision)?;
                }
                Output::Command(command) => {
                    ::metrics::counter!(COMMANDS.name, "action" => command.action.symbol())
                        .increment(1);
                    step.send(cluster.as_bytes(), &command)?;
                }
            }
        }
        let state = self.planner.cluster(&cluster).expect("apply created it");
        step.put_state(
            state_key(&cluster),
            serde_json::to_vec(state).expect("state serialises"),
        );
        let indexed = (record.partition, cluster);
        if !self.indexed.contains(&indexed) {
            step.put_state(index_key(indexed.0, &indexed.1), Vec::new());
            self.indexed.insert(indexed.clone());
        }
        self.checkpoints.changed(indexed.0, &indexed.1);
        Ok(Applied::Done)
    }

    fn describe_metrics(&self) {
        unicron_bus::metrics::describe_all(METRICS);
    }

    /// Partitions moved: cached clusters may be stale. Reload them lazily,
    /// after taking over what other instances decided meanwhile.
    async fn reassigned(&mut self, assigned: &[(String, i32)]) -> Result<(), PlannerError> {
        let held = co_partitioned(&self.topics.names, assigned)?;
        self.planner = Planner::new(self.settings.tuning.clone(), self.signer.clone());
        self.indexed.clear();
        self.checkpoints.retain(&held);
        crate::takeover::take_over(
            &mut self.planner,
            &self.store,
            &self.kafka,
            &self.brokers,
            &held,
            &mut self.checkpoints,
        )
        .await
    }

    fn published(&mut self, published: &[Published]) -> Result<Vec<Outgoing>, PlannerError> {
        self.checkpoints
            .published(published, &self.store, Instant::now())
    }

    /// Ticks let a checkpoint that is due by time go out on an idle planner.
    fn tick_every(&self) -> Option<Duration> {
        Some(CHECKPOINT_CHECK)
    }
}

/// The input partitions of `assigned`, which must be the same for every
/// input topic: a cluster's failures, events and results are one stream.
/// The group's `range` assignor gives that for co-partitioned topics; a
/// site overriding `partition.assignment.strategy` may break it, and then
/// two planners would decide for one cluster.
pub(crate) fn co_partitioned(
    names: &unicron_codec::Topics,
    assigned: &[(String, i32)],
) -> Result<BTreeSet<i32>, PlannerError> {
    let by_topic = PlannerInputs::TOPICS.map(|topic| {
        let name = names.name(topic);
        let partitions: BTreeSet<i32> = assigned
            .iter()
            .filter(|(t, _)| t == name)
            .map(|(_, p)| *p)
            .collect();
        (name, partitions)
    });
    let (first, held) = &by_topic[0];
    for (name, partitions) in &by_topic[1..] {
        if partitions != held {
            return Err(PlannerError::Config(format!(
                "kafka.partition.assignment.strategy: the group gave this planner partitions {held:?} of {first} but {partitions:?} of {name}; \
                 one planner must hold partition p of every input topic (use the default, `range`)"
            )));
        }
    }
    Ok(held.clone())
}
