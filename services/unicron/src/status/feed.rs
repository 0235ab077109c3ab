//! Follows the five control-plane topics from their beginning into the
//! status view. It reads outside any consumer group and commits nothing, so
//! it never takes partitions from a service. Undecodable records are skipped
//! here: the services that own those topics dead-letter them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use unicron_bus::consumer::InboundRecord;
use unicron_bus::{AvroCodec, Consumer, KafkaConfig};
use unicron_core::planner::InputEvent;
use unicron_core::status::{Read, Record, StatusView};
use unicron_core::{ClusterEvent, Command, CommandResult, Decision, FailureEvent};

/// Group id the reader's client carries; it never joins the group.
const READER: &str = "unicron-status";

struct Topics {
    failures: String,
    cluster: String,
    results: String,
    decisions: String,
    commands: String,
}

#[derive(Default)]
struct Codecs {
    failure: AvroCodec<FailureEvent>,
    cluster: AvroCodec<ClusterEvent>,
    result: AvroCodec<CommandResult>,
    decision: AvroCodec<Decision>,
    command: AvroCodec<Command>,
}

/// Reads into `view` until the task is dropped. Broker errors are logged
/// and retried: the page must outlive a broker restart.
pub async fn follow(kafka: KafkaConfig, brokers: String, view: Arc<Mutex<StatusView>>) {
    let topics = Topics {
        failures: kafka.topic("failures"),
        cluster: kafka.topic("cluster"),
        results: kafka.topic("command-results"),
        decisions: kafka.topic("decisions"),
        commands: kafka.topic("commands"),
    };
    let codecs = Codecs::default();
    let consumer = loop {
        match assigned(&kafka, &brokers, &topics) {
            Ok(consumer) => break consumer,
            Err(e) => {
                tracing::warn!(error = %e, "status page: waiting for the control-plane topics");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    loop {
        match consumer.recv().await {
            Ok(record) => {
                if let Some(read) = decode(&topics, &codecs, record) {
                    view.lock().unwrap_or_else(|e| e.into_inner()).apply(read);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "status page: reading the log");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn assigned(kafka: &KafkaConfig, brokers: &str, topics: &Topics) -> anyhow::Result<Consumer> {
    let consumer = Consumer::new(kafka, brokers, READER)?;
    let names = [
        topics.failures.as_str(),
        topics.cluster.as_str(),
        topics.results.as_str(),
        topics.decisions.as_str(),
        topics.commands.as_str(),
    ];
    let found = consumer.assign_all_from_start(&names)?;
    if found.len() < names.len() {
        let missing: Vec<&str> = names
            .iter()
            .filter(|n| !found.iter().any(|f| f == *n))
            .copied()
            .collect();
        anyhow::bail!("missing topics {}", missing.join(", "));
    }
    Ok(consumer)
}

fn decode(topics: &Topics, codecs: &Codecs, record: InboundRecord) -> Option<Read> {
    let t = record.topic.as_str();
    let bytes = &record.payload;
    let decoded = if t == topics.failures {
        codecs
            .failure
            .decode(bytes)
            .map(|f| Record::Input(InputEvent::Failure(f)))
    } else if t == topics.cluster {
        codecs
            .cluster
            .decode(bytes)
            .map(|c| Record::Input(InputEvent::Cluster(c)))
    } else if t == topics.results {
        codecs
            .result
            .decode(bytes)
            .map(|r| Record::Input(InputEvent::Result(r)))
    } else if t == topics.decisions {
        codecs.decision.decode(bytes).map(Record::Decision)
    } else if t == topics.commands {
        codecs.command.decode(bytes).map(Record::Command)
    } else {
        return None;
    };
    match decoded {
        Ok(record_value) => Some(Read {
            topic: record.topic,
            partition: record.partition,
            offset: record.offset,
            record: record_value,
        }),
        Err(e) => {
            tracing::debug!(topic = t, offset = record.offset, error = %e, "status page: skipped");
            None
        }
    }
}
