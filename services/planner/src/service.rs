//! The planner's step: a failure, cluster event or command result in;
//! decisions and signed commands out, with the cluster's state. The
//! runtime (unicron-runtime) does the rest.

use std::future::Future;
use std::time::Instant;

use unicron_bus::{AvroCodec, DecodeError, InboundRecord, KafkaConfig};
use unicron_core::planner::{ClusterState, Input, InputEvent, Output, Planner};
use unicron_core::signing::CommandSigner;
use unicron_core::{ClusterEvent, Command, CommandResult, Decision, FailureEvent};
use unicron_runtime::{Applied, Durability, Never, Processor, RuntimeOptions, StartFrom, Step};
use unicron_store::Store;

use crate::error::PlannerError;
use crate::settings::PlannerSettings;

const SERVICE: &str = "planner";

/// Topic names and codecs of the planner's inputs and outputs.
pub(crate) struct Topics {
    pub failures: String,
    pub cluster: String,
    pub results: String,
    pub decisions: String,
    pub commands: String,
}

impl Topics {
    fn new(kafka: &KafkaConfig) -> Topics {
        Topics {
            failures: kafka.topic("failures"),
            cluster: kafka.topic("cluster"),
            results: kafka.topic("command-results"),
            decisions: kafka.topic("decisions"),
            commands: kafka.topic("commands"),
        }
    }
}

#[derive(Default)]
pub(crate) struct Codecs {
    pub failure: AvroCodec<FailureEvent>,
    pub cluster: AvroCodec<ClusterEvent>,
    pub result: AvroCodec<CommandResult>,
    pub decision: AvroCodec<Decision>,
    pub command: AvroCodec<Command>,
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
        subscriptions: vec![
            topics.failures.clone(),
            topics.cluster.clone(),
            topics.results.clone(),
        ],
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
        codecs: Codecs::default(),
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
    codecs: Codecs,
}

impl Processor for PlannerProcessor {
    type Input = InputEvent;
    type Action = Never;
    type Outcome = Never;
    type Error = PlannerError;

    fn decode(&self, record: &InboundRecord) -> Result<InputEvent, DecodeError> {
        decode_input(&self.topics, &self.codecs, &record.topic, &record.payload)
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
                    let payload = self.codecs.decision.encode(&decision)?;
                    step.publish(&self.topics.decisions, cluster.as_bytes(), payload);
                }
                Output::Command(command) => {
                    metrics::counter!("unicron_planner_commands_total", "action" => command.action.symbol())
                        .increment(1);
                    let payload = self.codecs.command.encode(&command)?;
                    step.publish(&self.topics.commands, cluster.as_bytes(), payload);
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
            &self.codecs,
            assigned,
        )
        .await?;
        Ok(())
    }
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
