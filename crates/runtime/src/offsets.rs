//! An offset per topic and partition, updated once per record read: looked
//! up by `&str`, so a partition already seen costs no allocation.

use std::collections::BTreeMap;

/// The newest offset noted per topic and partition.
#[derive(Debug, Default, Clone)]
pub(crate) struct PartitionOffsets(BTreeMap<String, BTreeMap<i32, i64>>);

impl PartitionOffsets {
    pub fn note(&mut self, topic: &str, partition: i32, offset: i64) {
        match self.0.get_mut(topic) {
            Some(partitions) => {
                partitions.insert(partition, offset);
            }
            None => {
                self.0
                    .insert(topic.to_string(), BTreeMap::from([(partition, offset)]));
            }
        }
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<i64> {
        self.0.get(topic)?.get(&partition).copied()
    }

    /// Every (topic, partition, offset), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i32, i64)> {
        self.0
            .iter()
            .flat_map(|(t, p)| p.iter().map(move |(p, o)| (t.as_str(), *p, *o)))
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_noted_offset_of_each_partition_is_kept_in_order() {
        let mut offsets = PartitionOffsets::default();
        offsets.note("b", 1, 4);
        offsets.note("a", 2, 7);
        offsets.note("b", 1, 5);
        offsets.note("b", 0, 9);
        assert_eq!(offsets.get("b", 1), Some(5));
        assert_eq!(offsets.get("c", 1), None);
        let all: Vec<_> = offsets.iter().collect();
        assert_eq!(all, vec![("a", 2, 7), ("b", 0, 9), ("b", 1, 5)]);
        offsets.clear();
        assert_eq!(offsets.iter().count(), 0);
    }
}
