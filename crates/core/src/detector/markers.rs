//! Error markers: what makes a line no rule takes an error report (for the
//! learned tier and the unclassified-error templates). Literal words and
//! phrases, matched case-insensitively as whole words by one Aho-Corasick
//! pass, plus a glog `E`/`F` level at the start of the line: every line no
//! rule takes is looked at, so this must cost about what the rules'
//! prefilter does (a regex alternation of the same words, case-insensitive,
//! more than halved the detector's lines/s).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::Regex;

/// Literal error markers, compiled.
#[derive(Debug, Clone)]
pub struct ErrorMarkers {
    words: AhoCorasick,
    literals: Vec<String>,
}

impl ErrorMarkers {
    pub fn new(literals: &[String]) -> Result<ErrorMarkers, String> {
        if let Some(empty) = literals.iter().position(|l| l.trim().is_empty()) {
            return Err(format!("marker {} is empty", empty + 1));
        }
        let words = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(literals)
            .map_err(|e| e.to_string())?;
        Ok(ErrorMarkers {
            words,
            literals: literals.to_vec(),
        })
    }

    /// The marker `line` carries, if any.
    pub fn find<'a>(&'a self, line: &str) -> Option<&'a str> {
        if glog_error_level(line) {
            return Some("glog level E/F");
        }
        let bytes = line.as_bytes();
        self.words
            .find_overlapping_iter(line)
            .find(|m| {
                let before = m.start().checked_sub(1).map(|i| bytes[i]);
                let after = bytes.get(m.end()).copied();
                !before.is_some_and(is_word) && !after.is_some_and(is_word)
            })
            .map(|m| self.literals[m.pattern().as_usize()].as_str())
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
        assert!(ErrorMarkers::new(&[" ".into()]).is_err());
    }
}
