//! Nodes and jobs by name, at positions that stay valid.

use std::collections::BTreeMap;
use std::ops::{Index, IndexMut};

/// Entries in name order, so iteration visits them as a `BTreeMap` would.
/// None is added or removed after construction: a position found once (by
/// judging an action, or choosing a failure's target) still names the same
/// entry later, and indexing by it cannot miss.
#[derive(Debug, Clone)]
pub(super) struct Table<T> {
    entries: Vec<(String, T)>,
}

impl<T> FromIterator<(String, T)> for Table<T> {
    /// Sorted and, as a map would, the last of equal names kept.
    fn from_iter<I: IntoIterator<Item = (String, T)>>(entries: I) -> Self {
        let sorted: BTreeMap<String, T> = entries.into_iter().collect();
        Table {
            entries: sorted.into_iter().collect(),
        }
    }
}

impl<T> Table<T> {
    /// Where `name` is, if it is here.
    pub(super) fn position(&self, name: &str) -> Option<usize> {
        self.entries
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
    }

    pub(super) fn get(&self, name: &str) -> Option<&T> {
        self.position(name).map(|i| &self.entries[i].1)
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut T> {
        self.position(name).map(|i| &mut self.entries[i].1)
    }

    /// The name at `position`.
    pub(super) fn name(&self, position: usize) -> &str {
        &self.entries[position].0
    }

    /// The name and the entry at `position`, the entry to change.
    pub(super) fn entry_mut(&mut self, position: usize) -> (&str, &mut T) {
        let (name, value) = &mut self.entries[position];
        (name, value)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &T)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut T)> {
        self.entries.iter_mut().map(|(n, v)| (n.as_str(), v))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, v)| v)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.iter_mut().map(|(_, v)| v)
    }
}

impl<T> Index<usize> for Table<T> {
    type Output = T;

    fn index(&self, position: usize) -> &T {
        &self.entries[position].1
    }
}

impl<T> IndexMut<usize> for Table<T> {
    fn index_mut(&mut self, position: usize) -> &mut T {
        &mut self.entries[position].1
    }
}
