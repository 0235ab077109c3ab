use unicron_bus::Producer;
use unicron_bus::producer::Outbound;
use unicron_store::Store;

use crate::error::RuntimeError;

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
pub async fn drain(store: &Store, producer: &Producer) -> Result<Vec<Published>, RuntimeError> {
    let pending = store.outbox()?;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let records: Vec<Outbound<'_>> = pending
        .iter()
        .map(|(_, entry)| Outbound {
            topic: &entry.topic,
            partition: entry.partition,
            key: &entry.key,
            payload: &entry.payload,
        })
        .collect();
    let landed = producer.send_all(&records).await?;
    let keys: Vec<_> = pending.iter().map(|(key, _)| *key).collect();
    store.outbox_delivered_all(&keys)?;
    Ok(pending
        .into_iter()
        .zip(landed)
        .map(|((_, entry), at)| Published {
            topic: entry.topic,
            partition: at.partition,
            offset: at.offset,
        })
        .collect())
}
