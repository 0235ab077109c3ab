//! The idempotent producer every service writes with.

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::util::Timeout;

use crate::codec::AvroCodec;
use crate::config::KafkaConfig;
use crate::error::BusError;
use crate::metrics::RECORDS_OUT;
use crate::schemas::AvroRecord;

/// How long a send may wait in librdkafka's queue when it is full.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub partition: i32,
    pub offset: i64,
}

/// An idempotent producer (`enable.idempotence`, `acks=all`): retries never
/// duplicate or reorder records within a partition. Each send awaits the
/// broker's delivery report.
#[derive(Clone)]
pub struct Producer {
    inner: FutureProducer,
}

impl Producer {
    pub fn new(config: &KafkaConfig, brokers: &str) -> Result<Producer, BusError> {
        let client = config.client_config_with(
            brokers,
            &[
                ("enable.idempotence", "true".into()),
                ("acks", "all".into()),
                ("linger.ms", "2".into()),
                (
                    "message.max.bytes",
                    (config.max_record_bytes + 4096).to_string(),
                ),
            ],
        );
        Ok(Producer {
            inner: client.create()?,
        })
    }

    /// Sends raw bytes and waits for the delivery report.
    pub async fn send_bytes(
        &self,
        topic: &str,
        key: &[u8],
        payload: &[u8],
    ) -> Result<Delivered, BusError> {
        let record = FutureRecord::to(topic).key(key).payload(payload);
        let delivery = self
            .inner
            .send(record, Timeout::After(QUEUE_TIMEOUT))
            .await
            .map_err(|(e, _)| BusError::Kafka(e))?;
        metrics::counter!(RECORDS_OUT, "topic" => topic.to_string()).increment(1);
        Ok(Delivered {
            partition: delivery.partition,
            offset: delivery.offset,
        })
    }

    /// Encodes `record` with `codec` and sends it.
    pub async fn send<T: AvroRecord>(
        &self,
        topic: &str,
        key: &str,
        record: &T,
        codec: &AvroCodec<T>,
    ) -> Result<Delivered, BusError> {
        let payload = codec.encode(record)?;
        self.send_bytes(topic, key.as_bytes(), &payload).await
    }

    /// Waits until everything queued is delivered (or `timeout` passes).
    pub fn flush(&self, timeout: Duration) -> Result<(), BusError> {
        self.inner.flush(timeout)?;
        Ok(())
    }
}
