//! The outbox's way out: what a commit staged, published after it.

use unicron_bus::producer::Outbound;
use unicron_store::{OutboxEntry, Store};

use crate::error::RuntimeError;
use crate::io::Sink;

/// Where an output landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Publishes every pending outbox entry as one batch, in order, and then
/// removes them. Run at start (whatever a crash left unpublished goes out
/// first) and after every commit. A crash before the removal publishes them
/// again after the restart. Returns where each landed.
pub async fn drain(store: &Store, sink: &impl Sink) -> Result<Vec<Published>, RuntimeError> {
    let pending = store.outbox()?;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let records: Vec<Outbound<'_>> = pending.iter().map(|(_, entry)| outbound(entry)).collect();
    let landed = send(sink, &records).await?;
    let keys: Vec<_> = pending.iter().map(|(key, _)| *key).collect();
    store.outbox_delivered_all(&keys)?;
    Ok(landed)
}

/// An outbox entry as the producer takes it.
pub(crate) fn outbound(entry: &OutboxEntry) -> Outbound<'_> {
    Outbound {
        topic: &entry.topic,
        partition: entry.partition,
        key: &entry.key,
        payload: &entry.payload,
    }
}

/// Sends `records` as one batch, in order, and says where each landed.
pub(crate) async fn send(
    sink: &impl Sink,
    records: &[Outbound<'_>],
) -> Result<Vec<Published>, RuntimeError> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let landed = sink.send_all(records).await?;
    Ok(records
        .iter()
        .zip(landed)
        .map(|(record, at)| Published {
            topic: record.topic.to_string(),
            partition: at.partition,
            offset: at.offset,
        })
        .collect())
}
