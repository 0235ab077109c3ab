//! The planner's step: a failure, cluster event or command result in;
//! decisions and signed commands out, with the cluster's state. The
//! runtime (unicron-runtime) does the rest.

use std::future::Future;
use std::time::Instant;

use unicron_bus::{
    AvroCodec, DecodeError, InboundRecord, KafkaConfig, PlannerInputs, Subscription, Topic,
};
use unicron_core::planner::{ClusterState, Input, InputEvent, Output, Planner};
use unicron_core::signing::CommandSigner;
use unicron_core::{Command, Decision};
use unicron_runtime::{Applied, Durability, Never, Processor, RuntimeOptions, StartFrom, Step};
use unicron_store::Store;

use crate::error::PlannerError;
use crate::settings::PlannerSettings;

const SERVICE: &str = "planner";

/// How the planner reads its inputs and writes its outputs.
pub(crate) struct Topics {
    pub names: unicron_bus::Topics,
    pub inputs: PlannerInputs,
    pub decision: AvroCodec<Decision>,
    pub command: AvroCodec<Command>,
}

impl Topics {
    fn new(kafka: &KafkaConfig) -> Topics {
        let names = unicron_bus::Topics::new(kafka);
        Topics {
            inputs: PlannerInputs::new(names.clone()),
            names,
            decision: AvroCodec::default(),
            command: AvroCodec::default(),
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

pub(crate) fn state_key(cluster: &str) -> Vec<u8> {
    format!("cluster/{cluster}").into_bytes()
}

/// Loads `cluster`'s stored state into `planner` unless it has it already.
pub(crate) fn load_cluster(
    planner: &mut Planner,
    stored: impl FnOnce(&[u8]) -> Result<Option<Vec<u8>>, unicron_store::StoreError>,
    cluster: &str,
) -> Result<(), PlannerError> {
    if cluster.is_empty() || planner.cluster(cluster).is_some() {
        return Ok(());
    }
    if let Some(bytes) = stored(&state_key(cluster))? {
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
    let topics = Topics::new(kafka);
    let options = RuntimeOptions {
        service: SERVICE,
        group_id: settings.group_id.clone(),
        subscriptions: PlannerInputs::TOPICS
            .into_iter()
            .map(Subscription::Topic)
            .collect(),
        durability: Durability::Store {
            state_dir: settings.state_dir.clone(),
            sync: settings.sync_writes,
            start: StartFrom::StoredOffsets,
        },
    };
    let mut processor = PlannerProcessor {
        planner: Planner::new(settings.tuning.clone(), signer.clone()),
        settings: settings.clone(),
        signer,
        kafka: kafka.clone(),
        brokers: brokers.to_string(),
        topics,
    };
    tracing::info!(group = %settings.group_id, state_dir = %settings.state_dir.display(), "planner starting");
    unicron_runtime::run(kafka, brokers, &options, &mut processor, shutdown).await
}

struct PlannerProcessor {
    planner: Planner,
    settings: PlannerSettings,
    signer: CommandSigner,
    kafka: KafkaConfig,
    brokers: String,
    topics: Topics,
}

impl Processor for PlannerProcessor {
    type Input = InputEvent;
    type Action = Never;
    type Outcome = Never;
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
        metrics::histogram!("unicron_planner_decision_seconds")
            .record(started.elapsed().as_secs_f64());
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
                        metrics::gauge!("unicron_planner_waf", "cluster" => cluster.clone())
                            .set(chosen.waf);
                    }
                    metrics::counter!("unicron_planner_decisions_total", "cluster" => cluster.clone())
                        .increment(1);
                    let payload = self.topics.decision.encode(&decision)?;
                    step.publish(
                        self.topics.names.name(Topic::Decisions),
                        cluster.as_bytes(),
                        payload,
                    );
                }
                Output::Command(command) => {
                    metrics::counter!("unicron_planner_commands_total", "action" => command.action.symbol())
                        .increment(1);
                    let payload = self.topics.command.encode(&command)?;
                    step.publish(
                        self.topics.names.name(Topic::Commands),
                        cluster.as_bytes(),
                        payload,
                    );
                }
            }
        }
        let state = self.planner.cluster(&cluster).expect("apply created it");
        step.put_state(
            state_key(&cluster),
            serde_json::to_vec(state).expect("state serialises"),
        );
        Ok(Applied::Done)
    }

    async fn act(&mut self, action: &Never) -> Never {
        match *action {}
    }

    fn finish(&mut self, action: Never, _: Never, _: &mut Step<'_>) -> Result<(), PlannerError> {
        match action {}
    }

    fn describe_metrics(&self) {
        describe_metrics();
    }

    /// Partitions moved: cached clusters may be stale. Reload them lazily,
    /// after applying what other instances decided meanwhile.
    async fn reassigned(
        &mut self,
        assigned: &[(String, i32)],
        store: Option<&Store>,
    ) -> Result<(), PlannerError> {
        self.planner = Planner::new(self.settings.tuning.clone(), self.signer.clone());
        let store = store.expect("the planner runs with a store");
        crate::catch_up::catch_up(
            &mut self.planner,
            store,
            &self.kafka,
            &self.brokers,
            &self.topics,
            assigned,
        )
        .await?;
        Ok(())
    }
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
