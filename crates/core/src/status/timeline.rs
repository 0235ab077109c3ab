//! The timeline: every failure, decision, command and result read, newest
//! kept, each with a position pages can ask for entries after.

use std::collections::VecDeque;

use serde::Serialize;

/// Timeline entries kept (newest win).
pub const TIMELINE: usize = 2000;

/// Which stream a timeline entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Failure,
    Decision,
    Command,
    Result,
}

/// One line of the timeline; `detail` is the record as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// Position in the timeline, increasing; pages ask for entries after one.
    pub seq: u64,
    pub kind: EntryKind,
    pub cluster: String,
    pub time_ms: i64,
    /// The record's id (failure, decision or command id; a result's command id).
    pub id: String,
    pub summary: String,
    pub detail: serde_json::Value,
}

/// The newest [`TIMELINE`] entries.
#[derive(Debug)]
pub(super) struct Timeline {
    entries: VecDeque<Entry>,
    next_seq: u64,
}

impl Timeline {
    pub(super) fn new() -> Timeline {
        Timeline {
            entries: VecDeque::new(),
            next_seq: 1,
        }
    }

    /// Appends an entry for `record`, dropping the oldest past [`TIMELINE`].
    pub(super) fn push<T: Serialize>(
        &mut self,
        kind: EntryKind,
        cluster: &str,
        time_ms: i64,
        id: &str,
        summary: String,
        record: &T,
    ) {
        self.entries.push_back(Entry {
            seq: self.next_seq,
            kind,
            cluster: cluster.to_string(),
            time_ms,
            id: id.to_string(),
            summary,
            detail: serde_json::to_value(record).unwrap_or(serde_json::Value::Null),
        });
        self.next_seq += 1;
        if self.entries.len() > TIMELINE {
            self.entries.pop_front();
        }
    }

    /// Entries with `seq > after`, oldest first, at most `limit`.
    pub(super) fn after(
        &self,
        after: u64,
        limit: usize,
        keep: impl Fn(&Entry) -> bool,
    ) -> Vec<Entry> {
        self.entries
            .iter()
            .filter(|e| e.seq > after && keep(e))
            .take(limit)
            .cloned()
            .collect()
    }

    /// The newest position (0 before the first entry).
    pub(super) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filtered_page_reaches_past_other_clusters_entries() {
        let mut t = Timeline::new();
        for i in 0..10 {
            t.push(
                EntryKind::Failure,
                "a",
                i,
                &format!("a{i}"),
                String::new(),
                &(),
            );
        }
        t.push(EntryKind::Failure, "b", 10, "b0", String::new(), &());
        // Three entries a page: unfiltered, b's is not on the first.
        assert!(t.after(0, 3, |_| true).iter().all(|e| e.cluster == "a"));
        let of_b = t.after(0, 3, |e| e.cluster == "b");
        assert_eq!(
            of_b.iter()
                .map(|e| (e.id.as_str(), e.seq))
                .collect::<Vec<_>>(),
            [("b0", 11)]
        );
        assert!(t.after(11, 3, |e| e.cluster == "b").is_empty());
    }
}
