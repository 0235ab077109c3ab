//! Outbox entries: records to publish, stored until Kafka acknowledges them.

use crate::store::StoreError;

/// Position of an entry in the outbox; entries drain in key order, which is
/// commit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OutboxKey(pub u64);

impl OutboxKey {
    pub(crate) fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<OutboxKey, StoreError> {
        let array: [u8; 8] = bytes
            .try_into()
            .map_err(|_| StoreError::Corrupt(format!("outbox key of {} bytes", bytes.len())))?;
        Ok(OutboxKey(u64::from_be_bytes(array)))
    }
}

/// One record to publish: destination topic, key and encoded payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub topic: String,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

impl OutboxEntry {
    /// Three length-prefixed fields (u32 big-endian lengths).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let fields = [self.topic.as_bytes(), &self.key, &self.payload];
        let mut out = Vec::with_capacity(12 + fields.iter().map(|f| f.len()).sum::<usize>());
        for field in fields {
            out.extend_from_slice(&(field.len() as u32).to_be_bytes());
            out.extend_from_slice(field);
        }
        out
    }

    pub(crate) fn decode(mut bytes: &[u8]) -> Result<OutboxEntry, StoreError> {
        let mut field = || -> Result<Vec<u8>, StoreError> {
            let corrupt = || StoreError::Corrupt("truncated outbox entry".into());
            let len: [u8; 4] = bytes.get(..4).ok_or_else(corrupt)?.try_into().unwrap();
            let len = u32::from_be_bytes(len) as usize;
            let value = bytes.get(4..4 + len).ok_or_else(corrupt)?.to_vec();
            bytes = &bytes[4 + len..];
            Ok(value)
        };
        let topic = String::from_utf8(field()?)
            .map_err(|_| StoreError::Corrupt("outbox topic is not UTF-8".into()))?;
        let key = field()?;
        let payload = field()?;
        Ok(OutboxEntry {
            topic,
            key,
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trips_and_truncation_is_detected() {
        let entry = OutboxEntry {
            topic: "unicron.commands".into(),
            key: b"c1".to_vec(),
            payload: vec![0, 1, 2, 255],
        };
        let bytes = entry.encode();
        assert_eq!(OutboxEntry::decode(&bytes).unwrap(), entry);
        assert!(OutboxEntry::decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
