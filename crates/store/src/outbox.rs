//! Outbox entries: records to publish, stored until Kafka acknowledges them.

use crate::error::StoreError;

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

/// One record to publish: destination topic, key and encoded payload, and
/// the partition when the key's hash must not choose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub topic: String,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub partition: Option<i32>,
}

impl OutboxEntry {
    /// Three length-prefixed fields (u32 big-endian lengths), then the
    /// partition (i32 big-endian) if set. Entries written before the
    /// partition existed end after the payload and read back as `None`;
    /// older binaries ignore the trailing bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let fields = [self.topic.as_bytes(), &self.key, &self.payload];
        let mut out = Vec::with_capacity(16 + fields.iter().map(|f| f.len()).sum::<usize>());
        for field in fields {
            out.extend_from_slice(&(field.len() as u32).to_be_bytes());
            out.extend_from_slice(field);
        }
        if let Some(partition) = self.partition {
            out.extend_from_slice(&partition.to_be_bytes());
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
        let partition = match bytes.len() {
            0 => None,
            4 => Some(i32::from_be_bytes(bytes.try_into().expect("4 bytes"))),
            n => {
                return Err(StoreError::Corrupt(format!(
                    "outbox entry ends with {n} unknown bytes"
                )));
            }
        };
        Ok(OutboxEntry {
            topic,
            key,
            payload,
            partition,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trips_and_truncation_is_detected() {
        for partition in [None, Some(0), Some(5)] {
            let entry = OutboxEntry {
                topic: "unicron.commands".into(),
                key: b"c1".to_vec(),
                payload: vec![0, 1, 2, 255],
                partition,
            };
            let bytes = entry.encode();
            assert_eq!(OutboxEntry::decode(&bytes).unwrap(), entry);
            assert!(OutboxEntry::decode(&bytes[..bytes.len() - 1]).is_err());
        }
    }

    /// What a binary before partitions wrote still drains.
    #[test]
    fn an_entry_without_a_partition_reads_as_none() {
        let mut old = Vec::new();
        for field in [&b"unicron.decisions"[..], b"c1", b"\x01"] {
            old.extend_from_slice(&(field.len() as u32).to_be_bytes());
            old.extend_from_slice(field);
        }
        let entry = OutboxEntry::decode(&old).unwrap();
        assert_eq!(entry.partition, None);
        assert_eq!(entry.payload, b"\x01");
    }
}
