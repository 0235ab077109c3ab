//! Batches whose last outputs are being delivered while later batches are
//! read and applied (a round-applying processor without a store): landed
//! in order, each batch's records marked done only once its outputs are.

use std::collections::VecDeque;

use futures::FutureExt as _;
use unicron_bus::producer::{Outbound, OwnedOutbound, Sending};

use crate::error::RuntimeError;
use crate::io::Source;
use crate::offsets::PartitionOffsets;
use crate::outbox::Published;

/// How many batches may be delivered while the next is read and applied:
/// enough to cover an acknowledgement that takes longer than a batch.
pub(crate) const MAX_IN_FLIGHT: usize = 4;

/// A batch whose last outputs (the processor's last group and its dead
/// letters) were queued and not yet acknowledged.
pub(crate) struct InFlight {
    pub sending: Sending,
    /// The topic of each output the processor hears of, in order (the
    /// dead letters after them are not reported).
    pub reported: Vec<String>,
    pub done: PartitionOffsets,
}

/// The batches in flight, oldest first (at most [`MAX_IN_FLIGHT`]).
#[derive(Default)]
pub(crate) struct Flights(VecDeque<InFlight>);

impl Flights {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn push(&mut self, flight: InFlight) {
        self.0.push_back(flight);
    }

    /// Lands the batches that are delivered, oldest first, and waits for
    /// the oldest until at most `keep` are left: where their outputs
    /// landed goes to `published`, then their records are marked done.
    pub async fn land(
        &mut self,
        keep: usize,
        source: &impl Source,
        service: &str,
        published: &mut Vec<Published>,
    ) -> Result<(), RuntimeError> {
        loop {
            let must_wait = self.0.len() > keep;
            let Some(oldest) = self.0.front_mut() else {
                break;
            };
            let landed = match oldest.sending.as_mut().now_or_never() {
                Some(landed) => landed,
                None if must_wait => oldest.sending.as_mut().await,
                None => break,
            };
            let flight = self.0.pop_front().expect("the oldest is there");
            published.extend(flight.reported.into_iter().zip(landed?).map(|(topic, at)| {
                Published {
                    topic,
                    partition: at.partition,
                    offset: at.offset,
                }
            }));
            for (topic, partition, offset) in flight.done.iter() {
                // A partition revoked meanwhile takes no offsets: its new
                // owner reads those records again (a duplicate, no loss).
                if let Err(error) = source.mark_done(topic, partition, offset) {
                    tracing::warn!(service, topic, partition, offset, %error, "cannot store the offset");
                }
            }
        }
        Ok(())
    }
}

/// `record`, owned for as long as its delivery takes.
pub(crate) fn owned(record: Outbound<'_>) -> OwnedOutbound {
    OwnedOutbound {
        topic: record.topic.to_string(),
        partition: record.partition,
        key: record.key.to_vec(),
        payload: record.payload.to_vec(),
    }
}
