//! Follows the five control-plane topics from their beginning into the
//! status view. It reads outside any consumer group and commits nothing, so
//! it never takes partitions from a service. Undecodable records are skipped
//! here: the services that own those topics dead-letter them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use unicron_bus::consumer::InboundRecord;
use unicron_bus::{Consumer, KafkaConfig};
use unicron_core::status::{Read, Record, StatusView};
use unicron_history::{Decoded, Decoder};

/// Group id the reader's client carries; it never joins the group.
const READER: &str = "unicron-status";

/// Reads into `view` until the task is dropped. Broker errors are logged
/// and retried: the page must outlive a broker restart.
pub async fn follow(kafka: KafkaConfig, brokers: String, view: Arc<Mutex<StatusView>>) {
    let decoder = Decoder::new(&kafka);
    let consumer = loop {
        match assigned(&kafka, &brokers, &decoder) {
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
                if let Some(read) = decode(&decoder, record) {
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

fn assigned(kafka: &KafkaConfig, brokers: &str, decoder: &Decoder) -> anyhow::Result<Consumer> {
    let consumer = Consumer::new(kafka, brokers, READER)?;
    let names = decoder.control_plane_topics();
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

/// What the view takes: planner inputs, decisions and commands.
fn decode(decoder: &Decoder, record: InboundRecord) -> Option<Read> {
    let decoded = match decoder.decode(&record.topic, &record.payload)? {
        Ok(decoded) => decoded,
        Err(e) => {
            tracing::debug!(topic = record.topic, offset = record.offset, error = %e, "status page: skipped");
            return None;
        }
    };
    let record_value = match decoded {
        Decoded::Input(event) => Record::Input(event),
        Decoded::Decision(d) => Record::Decision(d),
        Decoded::Command(c) => Record::Command(c),
        Decoded::Telemetry(_) | Decoded::Log(_) | Decoded::Agent(_) => return None,
    };
    Some(Read {
        topic: record.topic,
        partition: record.partition,
        offset: record.offset,
        record: record_value,
    })
}
