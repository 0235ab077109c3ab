//! The learned tier's side of the rules: which lines it looks at, and its
//! verdict on a line no rule took.

use super::{FailureKind, LogRules, Verdict, truncate};

impl LogRules {
    /// The learned tier, for a line no rule took: only an error-marked
    /// line, and only at or above the model's threshold; an error-marked
    /// line it does not name is [`Verdict::Unnamed`].
    pub(super) fn learned_verdict(&self, line: &str) -> Verdict {
        if !self.for_learned(line) {
            return Verdict::Benign;
        }
        let Some(learned) = &self.learned else {
            return Verdict::Unnamed;
        };
        match learned.guess(truncate(line)) {
            Some(guess) => Verdict::Learned {
                kind: guess.kind,
                severity: guess.kind.default_severity(),
                score_permille: guess.score_permille,
            },
            None => Verdict::Unnamed,
        }
    }

    /// Whether the learned tier looks at `line` (once no rule took it):
    /// it carries an error marker and no handled marker.
    pub fn for_learned(&self, line: &str) -> bool {
        let line = truncate(line);
        self.markers
            .as_ref()
            .is_some_and(|m| m.find(line).is_some())
            && !self.handled.as_ref().is_some_and(|h| h.is_match(line))
    }

    /// An unclassified error: a line no rule takes that the learned tier
    /// looks at; with what the tier named, if anything.
    pub fn unclassified_error(&self, line: &str) -> Option<Option<(FailureKind, u16)>> {
        self.verdict(line).unclassified()
    }

    /// The error marker a line carries, if any.
    pub fn error_marker(&self, line: &str) -> Option<&str> {
        self.markers.as_ref()?.find(truncate(line))
    }
}
