use unicron_bus::Producer;
use unicron_store::Store;

use crate::error::RuntimeError;

/// Publishes pending outbox entries in order, removing each once
/// acknowledged. Run at start (whatever a crash left unpublished goes out
/// first) and after every commit.
pub async fn drain(store: &Store, producer: &Producer) -> Result<(), RuntimeError> {
    for (key, entry) in store.outbox()? {
        producer
            .send_bytes(&entry.topic, &entry.key, &entry.payload)
            .await?;
        store.outbox_delivered(key)?;
    }
    Ok(())
}
