//! The idempotent producer every service writes with.

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::util::Timeout;

use crate::error::BusError;
use crate::metrics::RECORDS_OUT;
use unicron_codec::codec::AvroCodec;
use unicron_codec::config::KafkaConfig;
use unicron_codec::schemas::AvroRecord;

/// How long a send may wait in librdkafka's queue when it is full.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a send keeps re-sending after errors a broker restart causes.
const RESEND_FOR: Duration = Duration::from_secs(120);

/// Where a record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub partition: i32,
    pub offset: i64,
}

/// A record for [`Producer::send_all`].
#[derive(Debug, Clone, Copy)]
pub struct Outbound<'a> {
    pub topic: &'a str,
    /// `None`: the partition the key hashes to.
    pub partition: Option<i32>,
    pub key: &'a [u8],
    pub payload: &'a [u8],
}

/// A record the producer holds while it is delivered
/// ([`Producer::send_owned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedOutbound {
    pub topic: String,
    pub partition: Option<i32>,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

impl OwnedOutbound {
    pub fn outbound(&self) -> Outbound<'_> {
        Outbound {
            topic: &self.topic,
            partition: self.partition,
            key: &self.key,
            payload: &self.payload,
        }
    }
}

/// The delivery of records already queued: where each landed, in order.
pub type Sending =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<Delivered>, BusError>> + Send>>;

/// How long a produce request may wait for its answer before the
/// connection is given up and made again (a site's `[kafka]` setting of
/// `socket.timeout.ms` wins).
pub const PRODUCE_TIMEOUT_MS: &str = "10000";

/// An idempotent producer (`enable.idempotence`, `acks=all`): retries never
/// duplicate or reorder records within a partition. Each send awaits the
/// broker's delivery report.
#[derive(Clone)]
pub struct Producer {
    inner: FutureProducer,
}

impl Producer {
    pub fn new(config: &KafkaConfig, brokers: &str) -> Result<Producer, BusError> {
        let client = crate::client::client_config_with(
            config,
            brokers,
            &[
                ("enable.idempotence", "true".into()),
                ("acks", "all".into()),
                ("linger.ms", "2".into()),
                // A produce request over a connection that died silently
                // (a cut link) is abandoned and the connection remade after
                // this, instead of librdkafka's 60 s during which it waits
                // on TCP's own retransmission backoff: agents cut off
                // together then came back up to 15 s apart after the link
                // returned.
                ("socket.timeout.ms", PRODUCE_TIMEOUT_MS.into()),
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

    /// Sends raw bytes and waits for the delivery report. librdkafka
    /// retries what Kafka marks retriable; errors a broker answers while it
    /// shuts down or restarts are re-sent here for up to two minutes, so a
    /// broker restart does not stop a service. A re-send may write the
    /// record twice; every consumer of unicron's topics tolerates that
    /// (ids, dedupe, at-least-once inputs).
    pub async fn send_bytes(
        &self,
        topic: &str,
        key: &[u8],
        payload: &[u8],
    ) -> Result<Delivered, BusError> {
        self.send_bytes_to(topic, None, key, payload).await
    }

    /// [`send_bytes`](Producer::send_bytes) to `partition` when set, where
    /// the key's hash must not choose it.
    pub async fn send_bytes_to(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: &[u8],
        payload: &[u8],
    ) -> Result<Delivered, BusError> {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        let delivery = loop {
            let mut record = FutureRecord::to(topic).key(key).payload(payload);
            if let Some(partition) = partition {
                record = record.partition(partition);
            }
            match self.inner.send(record, Timeout::After(QUEUE_TIMEOUT)).await {
                Ok(delivery) => break delivery,
                Err((e, _)) if transient(&e) && started.elapsed() < RESEND_FOR => {
                    tracing::warn!(%topic, error = %e, "send failed; sending again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                Err((e, _)) => return Err(BusError::Kafka(e)),
            }
        };
        ::metrics::counter!(RECORDS_OUT.name, "topic" => topic.to_string()).increment(1);
        Ok(Delivered {
            partition: delivery.partition,
            offset: delivery.offset,
        })
    }

    /// Sends `records` as one batch: every record is queued, in order,
    /// before any acknowledgement is awaited, so a batch costs about one
    /// round trip instead of one per record; the idempotent producer keeps
    /// their order within a partition. When a record fails (or the queue
    /// is full), it and every record after it are sent again one at a time
    /// as [`send_bytes_to`](Producer::send_bytes_to) does, in order; a
    /// record after it that had landed is then written twice, which
    /// unicron's consumers tolerate. Returns where each landed, in order.
    pub async fn send_all(&self, records: &[Outbound<'_>]) -> Result<Vec<Delivered>, BusError> {
        let queued = self.enqueue(records);
        self.delivered(records, queued).await
    }

    /// [`send_all`](Producer::send_all) in two halves: the records are
    /// queued now, behind everything sent before; the returned future
    /// awaits their delivery, so a caller can go on meanwhile.
    pub fn send_owned(&self, records: Vec<OwnedOutbound>) -> Sending {
        let outbound: Vec<Outbound<'_>> = records.iter().map(OwnedOutbound::outbound).collect();
        let queued = self.enqueue(&outbound);
        let producer = self.clone();
        Box::pin(async move {
            let outbound: Vec<Outbound<'_>> = records.iter().map(OwnedOutbound::outbound).collect();
            producer.delivered(&outbound, queued).await
        })
    }

    /// Queues `records` in order until one is refused (a full queue).
    fn enqueue(&self, records: &[Outbound<'_>]) -> Vec<rdkafka::producer::DeliveryFuture> {
        let mut queued = Vec::with_capacity(records.len());
        for record in records {
            let mut future = FutureRecord::to(record.topic)
                .key(record.key)
                .payload(record.payload);
            if let Some(partition) = record.partition {
                future = future.partition(partition);
            }
            match self.inner.send_result(future) {
                Ok(delivery) => queued.push(delivery),
                Err(_) => break,
            }
        }
        queued
    }

    /// Where `records` landed, `queued` being the deliveries of the first
    /// of them; the rest, and any after one that failed, are sent again
    /// one at a time.
    async fn delivered(
        &self,
        records: &[Outbound<'_>],
        queued: Vec<rdkafka::producer::DeliveryFuture>,
    ) -> Result<Vec<Delivered>, BusError> {
        let mut delivered = Vec::with_capacity(records.len());
        for (record, delivery) in records.iter().zip(queued) {
            match delivery.await {
                Ok(Ok(at)) => {
                    ::metrics::counter!(RECORDS_OUT.name, "topic" => record.topic.to_string())
                        .increment(1);
                    delivered.push(Delivered {
                        partition: at.partition,
                        offset: at.offset,
                    });
                }
                Ok(Err((e, _))) => {
                    tracing::warn!(topic = %record.topic, error = %e, "a batched send failed; sending the rest one at a time");
                    break;
                }
                Err(_) => break,
            }
        }
        for record in &records[delivered.len()..] {
            delivered.push(
                self.send_bytes_to(record.topic, record.partition, record.key, record.payload)
                    .await?,
            );
        }
        Ok(delivered)
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

/// Errors worth sending again: the broker was unreachable, restarting or
/// answered with an unspecific error; not a record the broker refuses.
fn transient(error: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    let code = match error {
        rdkafka::error::KafkaError::MessageProduction(code) => *code,
        _ => return false,
    };
    !matches!(
        code,
        Code::MessageSizeTooLarge
            | Code::InvalidMessageSize
            | Code::InvalidMessage
            | Code::InvalidRecord
            | Code::TopicAuthorizationFailed
            | Code::ClusterAuthorizationFailed
            | Code::UnknownTopicOrPartition
            | Code::UnknownTopic
            | Code::InvalidTopic
    )
}
