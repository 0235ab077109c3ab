//! Which detector instances hold their silence timers, from their rounds.

use std::collections::BTreeMap;

use crate::records::DetectorRound;

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
}

impl DetectorRounds {
    /// Takes one round and forgets instances that stopped writing them.
    pub(super) fn apply(&mut self, round: &DetectorRound) {
        self.rounds_read += 1;
        self.latest.insert(
            round.detector.clone(),
            (self.rounds_read, round.silence_held),
        );
        let oldest = self.rounds_read.saturating_sub(DETECTOR_CURRENT_ROUNDS);
        self.latest.retain(|_, (read, _)| *read > oldest);
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
