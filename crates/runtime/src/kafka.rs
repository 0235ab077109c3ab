//! The runtime's [`Source`] and [`Sink`] on Kafka: a group consumer whose
//! context is the service's [`Membership`], and the idempotent producer.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt as _;
use unicron_bus::producer::{Delivered, Outbound, OwnedOutbound, Sending};
use unicron_bus::{BusError, Consumer, Producer};
use unicron_codec::{DecodeError, InboundRecord};

use crate::io::{Positions, Sink, Source};
use crate::membership::Membership;

/// How long a stop waits for the broker to say where partitions end.
const ENDS_TIMEOUT: Duration = Duration::from_secs(5);

/// A group consumer and the membership its rebalances keep.
pub struct KafkaSource {
    pub(crate) consumer: Consumer<Membership>,
    pub(crate) membership: Membership,
}

impl Positions for KafkaSource {
    fn caught_up_with(&self, topic: &str, partition: i32, offset: i64) -> bool {
        self.consumer.caught_up_with(topic, partition, offset)
    }

    fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.consumer.high_watermark(topic, partition)
    }
}

impl Source for KafkaSource {
    async fn recv(&self) -> Result<InboundRecord, BusError> {
        self.consumer.recv().await
    }

    fn try_recv(&self) -> Option<Result<InboundRecord, BusError>> {
        self.consumer.recv().now_or_never()
    }

    fn oversized(&self, record: &InboundRecord) -> Option<DecodeError> {
        self.consumer.oversized(record)
    }

    fn mark_done(&self, topic: &str, partition: i32, offset: i64) -> Result<(), BusError> {
        self.consumer.mark_done(topic, partition, offset)
    }

    fn commit_now(&self) -> Result<(), BusError> {
        self.consumer.commit_now()
    }

    fn unread_ends(&self) -> Result<BTreeMap<(String, i32), i64>, BusError> {
        self.consumer.unread_ends(ENDS_TIMEOUT)
    }

    fn generation(&self) -> u64 {
        self.membership.generation()
    }

    fn holds(&self, topic: &str, partition: i32) -> bool {
        self.membership.holds(topic, partition)
    }

    fn assigned(&self) -> Vec<(String, i32)> {
        self.membership.assigned()
    }

    fn connection_losses(&self) -> u64 {
        self.membership.connection_losses()
    }
}

impl Sink for Producer {
    async fn send_all(&self, records: &[Outbound<'_>]) -> Result<Vec<Delivered>, BusError> {
        Producer::send_all(self, records).await
    }

    fn send_owned(&self, records: Vec<OwnedOutbound>) -> Sending {
        Producer::send_owned(self, records)
    }
}
