//! `detector.rules_file` reloaded when it changes: the file is looked at
//! every few seconds (its modification time and length); a changed file is
//! compiled first, and only a file that compiles goes into the next round,
//! which switches the detector to it (and replay with it). A bad file keeps
//! the rules in use and says why in one line.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use unicron_core::detector::LogRules;

use crate::metrics::RULES_RELOADS;

/// How often the file is looked at.
const CHECK_EVERY: Duration = Duration::from_secs(2);

pub(crate) struct RulesWatch {
    path: Option<PathBuf>,
    /// The file's modification time and length when last read.
    seen: Option<(SystemTime, u64)>,
    /// The text in use.
    text: String,
    checked_at: Option<Instant>,
}

impl RulesWatch {
    /// Watches `path`, whose `text` the detector starts with.
    pub(crate) fn new(path: Option<PathBuf>, text: String) -> RulesWatch {
        let seen = path.as_ref().and_then(|p| stamp(p).ok());
        RulesWatch {
            path,
            seen,
            text,
            checked_at: None,
        }
    }

    /// The text in use (what an instance's first round carries).
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The file's new text, once it changed and compiles.
    pub(crate) fn poll(&mut self, now: Instant) -> Option<String> {
        let path = self.path.clone()?;
        if self
            .checked_at
            .is_some_and(|at| now.duration_since(at) < CHECK_EVERY)
        {
            return None;
        }
        self.checked_at = Some(now);
        let stamp = stamp(&path).ok();
        if stamp == self.seen {
            return None;
        }
        self.seen = stamp;
        let refused = |why: String| {
            ::metrics::counter!(RULES_RELOADS.name, "result" => "refused").increment(1);
            tracing::warn!(
                "detector.rules_file: {}: {why}; keeping the rules in use",
                path.display()
            );
            None
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => return refused(e.to_string()),
        };
        if text == self.text {
            return None;
        }
        if let Err(e) = LogRules::with_user(&text) {
            return refused(e.to_string());
        }
        ::metrics::counter!(RULES_RELOADS.name, "result" => "applied").increment(1);
        tracing::info!(path = %path.display(), "detector rules reloaded");
        self.text = text.clone();
        Some(text)
    }
}

fn stamp(path: &std::path::Path) -> std::io::Result<(SystemTime, u64)> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.modified()?, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_is_taken_only_if_it_compiles() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules.toml");
        std::fs::write(&path, "").unwrap();
        let mut watch = RulesWatch::new(Some(path.clone()), String::new());
        let mut now = Instant::now();
        assert_eq!(watch.poll(now), None);
        let good = "[[rule]]\nname = \"site.fan\"\nkind = \"gpu_driver_error\"\nkeywords = [\"fan stopped\"]\npattern = 'fan stopped'\n";
        std::fs::write(&path, good).unwrap();
        // Looked at again only after CHECK_EVERY.
        assert_eq!(watch.poll(now), None);
        now += CHECK_EVERY;
        assert_eq!(watch.poll(now).as_deref(), Some(good));
        assert_eq!(watch.text(), good);
        std::fs::write(&path, "[[rule]]\nname = \"broken\"\n").unwrap();
        now += CHECK_EVERY;
        assert_eq!(watch.poll(now), None);
        assert_eq!(watch.text(), good, "a bad file keeps the rules in use");
        now += CHECK_EVERY;
        assert_eq!(watch.poll(now), None, "and is not read again unchanged");
    }
}
