//! Dead-letter routing: a record a service cannot use goes to `unicron.dlq`
//! with the reason, a counter is bumped, and processing goes on (docs/design.md §4).

use unicron_core::DeadLetter;

use crate::consumer::InboundRecord;
use crate::error::BusError;
use crate::metrics::DLQ_RECORDS;
use crate::producer::Producer;
use unicron_codec::codec::{AvroCodec, DecodeError};

/// Builds the dead letter for `record`: the payload is cut to
/// `payload_bound` bytes, its original size kept.
pub fn dead_letter(
    record: &InboundRecord,
    error: &str,
    service: &str,
    payload_bound: usize,
) -> DeadLetter {
    let kept = record.payload.len().min(payload_bound);
    DeadLetter {
        source_topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        key: record.key.clone(),
        payload: record.payload[..kept].to_vec(),
        payload_size: record.payload.len() as i64,
        error: error.to_string(),
        service: service.to_string(),
        time_ms: record.timestamp_ms.unwrap_or(0),
    }
}

/// The dead letter for `record`, logged, counted and encoded for the DLQ
/// topic as (key, payload), the key being the source topic: for services
/// that publish through an outbox rather than a [`DeadLetterSink`].
pub fn encode_dead_letter(
    record: &InboundRecord,
    reason: &str,
    service: &str,
    payload_bound: usize,
    codec: &AvroCodec<DeadLetter>,
) -> Result<(Vec<u8>, Vec<u8>), BusError> {
    tracing::warn!(topic = %record.topic, partition = record.partition, offset = record.offset, reason, "dead-lettered");
    ::metrics::counter!(
        DLQ_RECORDS.name,
        "source_topic" => record.topic.clone(),
        "service" => service.to_string()
    )
    .increment(1);
    let letter = dead_letter(record, reason, service, payload_bound);
    Ok((record.topic.clone().into_bytes(), codec.encode(&letter)?))
}

/// Where one service sends its dead letters.
#[derive(Clone)]
pub struct DeadLetterSink {
    producer: Producer,
    topic: String,
    service: String,
    payload_bound: usize,
    codec: AvroCodec<DeadLetter>,
}

impl DeadLetterSink {
    pub fn new(producer: Producer, topic: String, service: &str, payload_bound: usize) -> Self {
        DeadLetterSink {
            producer,
            topic,
            service: service.to_string(),
            payload_bound,
            codec: AvroCodec::default(),
        }
    }

    /// Publishes the dead letter for `record` and waits for delivery.
    pub async fn send(&self, record: &InboundRecord, error: &DecodeError) -> Result<(), BusError> {
        self.send_reason(record, &error.to_string()).await
    }

    /// Publishes the dead letter for `record` with a free-form reason (a
    /// record that decoded but makes no sense) and waits for delivery.
    pub async fn send_reason(&self, record: &InboundRecord, error: &str) -> Result<(), BusError> {
        let letter = dead_letter(record, error, &self.service, self.payload_bound);
        tracing::warn!(
            topic = %record.topic,
            partition = record.partition,
            offset = record.offset,
            %error,
            "dead-lettered"
        );
        self.producer
            .send(&self.topic, &record.topic, &letter, &self.codec)
            .await?;
        ::metrics::counter!(
            DLQ_RECORDS.name,
            "source_topic" => record.topic.clone(),
            "service" => self.service.clone()
        )
        .increment(1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_bounded_and_size_kept() {
        let record = InboundRecord {
            topic: "unicron.logs".into(),
            partition: 3,
            offset: 42,
            key: Some(b"node-1".to_vec()),
            payload: vec![7; 1000],
            timestamp_ms: None,
            caught_up: false,
        };
        let letter = dead_letter(&record, "avro LogRecord: bad", "detector", 100);
        assert_eq!(letter.payload.len(), 100);
        assert_eq!(letter.payload_size, 1000);
        assert_eq!((letter.partition, letter.offset), (3, 42));
        assert_eq!(letter.time_ms, 0);
        assert_eq!(letter.error, "avro LogRecord: bad");
    }
}
