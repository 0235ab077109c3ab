use unicron_bus::Producer;
use unicron_store::Store;

use crate::error::RuntimeError;

/// Where an output landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Publishes pending outbox entries in order, removing each once
/// acknowledged. Run at start (whatever a crash left unpublished goes out
/// first) and after every commit. Returns where each landed.
pub async fn drain(store: &Store, producer: &Producer) -> Result<Vec<Published>, RuntimeError> {
    let mut published = Vec::new();
    for (key, entry) in store.outbox()? {
        let at = producer
            .send_bytes_to(&entry.topic, entry.partition, &entry.key, &entry.payload)
            .await?;
        store.outbox_delivered(key)?;
        published.push(Published {
            topic: entry.topic,
            partition: at.partition,
            offset: at.offset,
        });
    }
    Ok(published)
}
