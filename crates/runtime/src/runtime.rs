//! [`run`]: the loop wired to Kafka.

use std::future::Future;

use unicron_bus::{Consumer, Producer};
use unicron_codec::{KafkaConfig, Topics};

use crate::driver::{Outputs, drive};
use crate::error::RuntimeError;
use crate::kafka::KafkaSource;
use crate::membership::Membership;
use crate::options::{Durability, RuntimeOptions, StartFrom};
use crate::processor::Processor;

/// Runs `processor` on Kafka until `shutdown` completes or an
/// unrecoverable error.
pub async fn run<P: Processor>(
    kafka: &KafkaConfig,
    brokers: &str,
    options: &RuntimeOptions,
    processor: &mut P,
    shutdown: impl Future<Output = ()>,
) -> Result<(), P::Error> {
    processor.describe_metrics();
    unicron_bus::metrics::register(options.service);
    let producer = Producer::new(kafka, brokers).map_err(RuntimeError::from)?;
    let membership = match &options.durability {
        Durability::Store {
            store,
            start: StartFrom::StoredOffsets,
        } => {
            let lookup = store.clone();
            Membership::from_stored_offsets(
                options.service,
                Box::new(move |topic, partition| lookup.offset(topic, partition).ok().flatten()),
            )
        }
        _ => Membership::from_group_offsets(options.service),
    };
    let consumer = Consumer::with_context(kafka, brokers, &options.group_id, membership.clone())
        .map_err(RuntimeError::from)?;
    let names = Topics::new(kafka);
    let subscriptions: Vec<String> = options
        .subscriptions
        .iter()
        .map(|s| s.resolve(&names))
        .collect();
    let topics: Vec<&str> = subscriptions.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(RuntimeError::from)?;
    tracing::info!(service = options.service, group = %options.group_id, topics = ?subscriptions, "running");
    let source = KafkaSource {
        consumer,
        membership,
    };
    drive(
        &source,
        &producer,
        options,
        &Outputs::for_cluster(kafka, options.cluster.as_deref()),
        processor,
        shutdown,
    )
    .await?;
    tracing::info!(service = options.service, "stopped");
    Ok(())
}
