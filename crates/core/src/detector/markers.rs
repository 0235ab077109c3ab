//! Error markers: what makes a line no rule takes an error report (for the
//! learned tier and the unclassified-error templates). Literal words and
//! phrases, matched case-insensitively as whole words by one Aho-Corasick
//! pass, plus a glog `E`/`F` level at the start of the line and a non-zero
//! exit code or status (`exited with code 137`; code 0 is no error): every line no
//! rule takes is looked at, so this must cost about what the rules'
//! prefilter does (a regex alternation of the same words, case-insensitive,
//! more than halved the detector's lines/s).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::Regex;

/// Literal error markers, compiled.
#[derive(Debug, Clone)]
pub struct ErrorMarkers {
    /// The literals, then `exit` (confirmed by `nonzero_exit`).
    words: AhoCorasick,
    literals: Vec<String>,
    nonzero_exit: Regex,
}

impl ErrorMarkers {
    pub fn new(literals: &[String]) -> Result<ErrorMarkers, String> {
        if let Some(empty) = literals.iter().position(|l| l.trim().is_empty()) {
            return Err(format!("marker {} is empty", empty + 1));
        }
        let words = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(literals.iter().map(String::as_str).chain(["exit"]))
            .map_err(|e| e.to_string())?;
        Ok(ErrorMarkers {
            words,
            literals: literals.to_vec(),
            nonzero_exit: Regex::new(
                r"(?i)(?-u:\b)exit(?:ed)?(?: with)?(?: exit)? (?:code|status)[ :=]*-?[1-9]",
            )
            .expect("a valid regex"),
        })
    }

    /// The marker `line` carries, if any.
    pub fn find<'a>(&'a self, line: &str) -> Option<&'a str> {
        if glog_error_level(line) {
            return Some("glog level E/F");
        }
        let bytes = line.as_bytes();
        let mut exit = false;
        for m in self.words.find_overlapping_iter(line) {
            let Some(literal) = self.literals.get(m.pattern().as_usize()) else {
                exit = true; // `exit`, a word or a prefix (`exited`)
                continue;
            };
            let before = m.start().checked_sub(1).map(|i| bytes[i]);
            let after = bytes.get(m.end()).copied();
            if !before.is_some_and(is_word) && !after.is_some_and(is_word) {
                return Some(literal);
            }
        }
        (exit && self.nonzero_exit.is_match(line)).then_some("non-zero exit")
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `E1205 ` or `F1205 `: glog's error and fatal levels.
fn glog_error_level(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 5
        && matches!(b[0], b'E' | b'F')
        && b[1..5].iter().all(u8::is_ascii_digit)
        && b[5] == b' '
}

/// One regex of all `patterns`; each is named in its error.
pub fn any_of(patterns: &[String]) -> Result<Regex, String> {
    for p in patterns {
        Regex::new(p).map_err(|e| {
            let e = e
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            format!("{p:?}: {e}")
        })?;
    }
    let joined = patterns
        .iter()
        .map(|p| format!("(?:{p})"))
        .collect::<Vec<_>>()
        .join("|");
    Regex::new(&joined).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_words_case_insensitively_and_glog_levels() {
        let m = ErrorMarkers::new(&["error".into(), "timed out".into()]).unwrap();
        assert_eq!(m.find("RuntimeError: ERROR in x"), Some("error"));
        assert_eq!(m.find("no errors here, terror"), None);
        assert_eq!(m.find("the call Timed Out."), Some("timed out"));
        assert_eq!(
            m.find("E1205 12:00:00.1 worker.cc:3] boom"),
            Some("glog level E/F")
        );
        assert_eq!(m.find("I1205 12:00:00.1 worker.cc:3] fine"), None);
        assert_eq!(
            m.find("worker exited with exit code 137"),
            Some("non-zero exit")
        );
        assert_eq!(m.find("Process 4412 exited with code 0"), None);
        assert_eq!(m.find("Exit status: -9"), Some("non-zero exit"));
        assert!(ErrorMarkers::new(&[" ".into()]).is_err());
    }
}
