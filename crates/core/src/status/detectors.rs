//! Which detector instances hold their silence timers, from their rounds.

use std::collections::BTreeMap;

use crate::detector::templates::{Template, Templates};
use crate::records::{DetectorRound, UnclassifiedTemplate};

/// Unclassified-error templates kept per cluster.
pub const UNCLASSIFIED_PER_CLUSTER: usize = 200;

/// Rounds read after an instance's last one before it no longer counts as
/// running (it was restarted under a new name, or scaled away).
const DETECTOR_CURRENT_ROUNDS: u64 = 2_000;

/// The latest round of each running detector instance.
#[derive(Debug, Default)]
pub(super) struct DetectorRounds {
    /// Per instance: when its latest round was read (counting rounds) and
    /// whether that round held the silence timers.
    latest: BTreeMap<String, (u64, bool)>,
    rounds_read: u64,
    /// Per cluster: the error-marked lines no rule took, by template.
    unclassified: BTreeMap<String, Templates>,
}

impl DetectorRounds {
    /// Takes one round and forgets instances that stopped writing them.
    pub(super) fn apply(&mut self, round: &DetectorRound) {
        for u in &round.unclassified {
            self.unclassified
                .entry(u.cluster.clone())
                .or_insert_with(|| Templates::new(UNCLASSIFIED_PER_CLUSTER))
                .merge(&Template::from_record(u));
        }
        self.rounds_read += 1;
        self.latest.insert(
            round.detector.clone(),
            (self.rounds_read, round.silence_held),
        );
        let oldest = self.rounds_read.saturating_sub(DETECTOR_CURRENT_ROUNDS);
        self.latest.retain(|_, (read, _)| *read > oldest);
    }

    /// Unclassified-error templates of `cluster` (or all), newest first,
    /// at most `limit`.
    pub(super) fn unclassified(
        &self,
        cluster: Option<&str>,
        limit: usize,
    ) -> Vec<UnclassifiedTemplate> {
        let mut all: Vec<UnclassifiedTemplate> = self
            .unclassified
            .iter()
            .filter(|(c, _)| cluster.is_none_or(|want| want == c.as_str()))
            .flat_map(|(c, t)| t.newest().into_iter().map(|t| t.to_record(c)))
            .collect();
        all.sort_by(|a, b| {
            (b.last_ms, b.count, &a.cluster, &a.template).cmp(&(
                a.last_ms,
                a.count,
                &b.cluster,
                &b.template,
            ))
        });
        all.truncate(limit);
        all
    }

    /// The instances whose latest round held the timers, by name.
    pub(super) fn timers_held(&self) -> Vec<String> {
        self.latest
            .iter()
            .filter(|(_, (_, held))| *held)
            .map(|(name, _)| name.clone())
            .collect()
    }
}
