//! The second tier: a naive Bayes model over a line's words and word pairs,
//! learned from the corpus of real lines, for lines that carry an error
//! marker and that no rule takes. It names a failure only when its
//! posterior is at or above the threshold chosen on lines it was not
//! trained on, so a phrasing no rule has seen can still be recognised by
//! the words it shares with lines of the same kind.
//!
//! Deterministic: features are sorted and summed in that order, counts are
//! integers in the shipped file (`crates/core/rules/learned_model.json`,
//! made by `unicron train-classifier`), and the same file gives the same
//! score on every machine.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::taxonomy::FailureKind;

/// The shipped model, compiled into the binary.
pub const BUILTIN_MODEL: &str = include_str!("../../rules/learned_model.json");

/// Laplace smoothing of the counts.
const ALPHA: f64 = 0.5;

/// Features seen fewer times than this in the whole corpus are left out
/// (they name a host, a path or a one-off and only add noise).
const MIN_COUNT: u32 = 2;

/// The longest line prefix looked at.
const MAX_BYTES: usize = 2048;

/// A model as shipped: per class, the lines and the features counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFile {
    /// Class symbols: failure kinds, and `benign`.
    pub classes: Vec<String>,
    /// Training lines per class.
    pub lines: Vec<u32>,
    /// The lowest posterior at which a failure is named.
    pub threshold_permille: u16,
    /// Feature → (class index, lines of that class holding it).
    pub features: BTreeMap<String, Vec<(u16, u32)>>,
}

/// Why a model file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("learned model: {0}")]
    Invalid(String),
}

/// A compiled model.
#[derive(Debug, Clone)]
pub struct Learned {
    /// `None` for `benign`.
    classes: Vec<Option<FailureKind>>,
    log_prior: Vec<f64>,
    /// Feature hash → its row in `rows`, sorted by hash.
    index: Vec<(u64, usize)>,
    /// Per feature, per class: log P(a line of the class holds it).
    rows: Vec<f64>,
    threshold: f64,
}

/// A learned verdict: the kind and its posterior, in thousandths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guess {
    pub kind: FailureKind,
    pub score_permille: u16,
}

/// The features of a line: its lower-cased words (a word with a digit is
/// masked to `#`, so numbers, addresses and ids are one token) and each
/// pair of neighbouring words, each once.
pub fn features(line: &str) -> BTreeSet<String> {
    let words = Words::of(line);
    let mut out = BTreeSet::new();
    words.each_feature(|parts| {
        out.insert(parts.join(" "));
    });
    out
}

/// The hashes ([`feature_hash`]) of [`features`], sorted, each once: what
/// scoring looks up, with one allocation of the line's words instead of a
/// string per feature.
pub fn feature_hashes(line: &str) -> Vec<u64> {
    let words = Words::of(line);
    let mut out = Vec::with_capacity(2 * words.spans.len());
    words.each_feature(|parts| out.push(hash_parts(parts)));
    out.sort_unstable();
    out.dedup();
    out
}

/// FNV-1a of a feature's text.
pub fn feature_hash(feature: &str) -> u64 {
    hash_parts(&[feature])
}

fn hash_parts(parts: &[&str]) -> u64 {
    parts
        .iter()
        .enumerate()
        .fold(FNV_OFFSET, |hash, (i, part)| {
            let space = (i > 0).then_some(b' ');
            fnv1a(hash, space.into_iter().chain(part.bytes()))
        })
}

/// FNV-1a's starting value.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a (64-bit) of `bytes`, continuing from `hash`: stable across
/// machines and releases, unlike `std`'s hashers.
pub(crate) fn fnv1a(hash: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(hash, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A line's words, lower-cased and masked, in one buffer.
struct Words {
    text: String,
    spans: Vec<(usize, usize)>,
}

impl Words {
    fn of(line: &str) -> Words {
        let line = &line[..floor_char_boundary(line, MAX_BYTES)];
        let mut text = String::with_capacity(line.len());
        let mut spans = Vec::new();
        for w in line
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
        {
            let start = text.len();
            if w.bytes().any(|b| b.is_ascii_digit()) {
                text.push('#');
            } else if w.is_ascii() {
                text.extend(w.bytes().map(|b| char::from(b.to_ascii_lowercase())));
            } else {
                text.push_str(&w.to_lowercase());
            }
            spans.push((start, text.len()));
        }
        Words { text, spans }
    }

    fn word(&self, i: usize) -> &str {
        let (a, b) = self.spans[i];
        &self.text[a..b]
    }

    /// Each word longer than one byte, then each pair of neighbours.
    fn each_feature(&self, mut f: impl FnMut(&[&str])) {
        for i in 0..self.spans.len() {
            let w = self.word(i);
            if w.len() > 1 {
                f(&[w]);
            }
        }
        for i in 1..self.spans.len() {
            f(&[self.word(i - 1), self.word(i)]);
        }
    }
}

fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

/// Learns a model from `(class symbol, line)` examples.
pub fn train<'a>(
    examples: impl IntoIterator<Item = (&'a str, &'a str)>,
    threshold_permille: u16,
) -> ModelFile {
    let mut classes: Vec<String> = FailureKind::ALL.iter().map(|k| k.symbol().into()).collect();
    classes.push("benign".into());
    let mut lines = vec![0u32; classes.len()];
    let mut counts: BTreeMap<String, BTreeMap<u16, u32>> = BTreeMap::new();
    for (class, line) in examples {
        let Some(c) = classes.iter().position(|k| k == class) else {
            continue;
        };
        lines[c] += 1;
        for f in features(line) {
            *counts.entry(f).or_default().entry(c as u16).or_default() += 1;
        }
    }
    let features = counts
        .into_iter()
        .filter(|(_, by)| by.values().sum::<u32>() >= MIN_COUNT)
        .map(|(f, by)| (f, by.into_iter().collect()))
        .collect();
    ModelFile {
        classes,
        lines,
        threshold_permille,
        features,
    }
}

impl Learned {
    /// The shipped model.
    pub fn builtin() -> Learned {
        Learned::from_json(BUILTIN_MODEL).expect("the shipped model loads")
    }

    pub fn from_json(text: &str) -> Result<Learned, ModelError> {
        let file: ModelFile =
            serde_json::from_str(text).map_err(|e| ModelError::Invalid(e.to_string()))?;
        Learned::compile(&file)
    }

    /// Multinomial naive Bayes over the kept features (each counted once
    /// a line): a feature present adds log P(f | class); features the
    /// model never kept are ignored. Classes with no training line are
    /// left out (an empty class would win on any unseen word).
    pub fn compile(file: &ModelFile) -> Result<Learned, ModelError> {
        let n = file.classes.len();
        if n == 0 || file.lines.len() != n {
            return Err(ModelError::Invalid(
                "classes and lines differ in length".into(),
            ));
        }
        let classes = file
            .classes
            .iter()
            .map(|s| match s.as_str() {
                "benign" => Ok(None),
                s => s
                    .parse()
                    .map(Some)
                    .map_err(|e: crate::UnknownSymbol| ModelError::Invalid(e.to_string())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut totals = vec![0f64; n];
        for (feature, by) in &file.features {
            for &(c, count) in by {
                let slot = totals.get_mut(usize::from(c)).ok_or_else(|| {
                    ModelError::Invalid(format!("feature {feature:?}: class {c} of {n}"))
                })?;
                *slot += f64::from(count);
            }
        }
        let kept: Vec<usize> = (0..n).filter(|&c| file.lines[c] > 0).collect();
        if kept.is_empty() {
            return Err(ModelError::Invalid("no class has a training line".into()));
        }
        let vocabulary = file.features.len() as f64;
        let lines: f64 = kept.iter().map(|&c| f64::from(file.lines[c])).sum();
        let log_prior = kept
            .iter()
            .map(|&c| (f64::from(file.lines[c]) / lines).ln())
            .collect();
        let denominator: Vec<f64> = kept
            .iter()
            .map(|&c| totals[c] + ALPHA * vocabulary)
            .collect();
        let k = kept.len();
        let mut index = Vec::with_capacity(file.features.len());
        let mut rows = Vec::with_capacity(file.features.len() * k);
        for (feature, by) in &file.features {
            index.push((feature_hash(feature), index.len()));
            let row = rows.len();
            rows.extend(denominator.iter().map(|d| (ALPHA / d).ln()));
            for &(c, count) in by {
                if let Some(j) = kept.iter().position(|&kc| kc == usize::from(c)) {
                    rows[row + j] = ((f64::from(count) + ALPHA) / denominator[j]).ln();
                }
            }
        }
        index.sort_unstable();
        if index.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(ModelError::Invalid("two features share a hash".into()));
        }
        Ok(Learned {
            classes: kept.iter().map(|&c| classes[c]).collect(),
            log_prior,
            index,
            rows,
            threshold: f64::from(file.threshold_permille) / 1000.0,
        })
    }

    /// The most likely class of `line` and its posterior.
    pub fn score(&self, line: &str) -> (Option<FailureKind>, f64) {
        let mut joint = self.log_prior.clone();
        let k = joint.len();
        let mut known = 0u32;
        // Sorted hashes: summed in the same order on every machine.
        for f in feature_hashes(line) {
            if let Ok(at) = self.index.binary_search_by_key(&f, |&(h, _)| h) {
                known += 1;
                let row = &self.rows[self.index[at].1 * k..][..k];
                for (j, l) in joint.iter_mut().zip(row) {
                    *j += l;
                }
            }
        }
        let best = (0..joint.len())
            .max_by(|&a, &b| joint[a].total_cmp(&joint[b]).then(b.cmp(&a)))
            .expect("at least one class");
        // Tempered by the features counted: naive Bayes multiplies words
        // that are far from independent, so its raw posterior is near 1
        // for almost any line; per feature, the margin means something.
        let temper = f64::from(known.max(1)).sqrt();
        let sum: f64 = joint
            .iter()
            .map(|j| ((j - joint[best]) / temper).exp())
            .sum();
        (self.classes[best], 1.0 / sum)
    }

    /// A failure, if the model names one at or above its threshold.
    pub fn guess(&self, line: &str) -> Option<Guess> {
        let (kind, posterior) = self.score(line);
        let kind = kind?;
        (posterior >= self.threshold).then(|| Guess {
            kind,
            score_permille: (posterior * 1000.0).floor() as u16,
        })
    }
}

/// One labelled line of a corpus file (`kind<TAB>source<TAB>line`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Example<'a> {
    pub class: &'a str,
    pub source: &'a str,
    pub line: &'a str,
}

/// The labelled lines of a corpus file; `#` lines and blank ones skipped.
pub fn corpus(text: &str) -> Result<Vec<Example<'_>>, ModelError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
        .map(|(n, l)| {
            let mut fields = l.splitn(3, '\t');
            match (fields.next(), fields.next(), fields.next()) {
                (Some(class), Some(source), Some(line)) => Ok(Example {
                    class,
                    source,
                    line,
                }),
                _ => Err(ModelError::Invalid(format!(
                    "corpus line {}: not kind<TAB>source<TAB>line",
                    n + 1
                ))),
            }
        })
        .collect()
}

/// Whether a source is in the held-out half: FNV-1a of its URL, so the
/// split is fixed by the data and a thread is wholly on one side.
pub fn held_out(source: &str) -> bool {
    fnv1a(FNV_OFFSET, source.bytes()) % 2 == 1
}

/// The lowest threshold, in thousandths and at least `floor`, at which
/// `model` names no failure for any of `benign` lines, with a margin of
/// `margin` above the highest such score.
pub fn threshold_for(model: &Learned, benign: &[&str], floor: u16, margin: u16) -> u16 {
    let worst = benign
        .iter()
        .filter_map(|line| match model.score(line) {
            (Some(_), p) => Some((p * 1000.0).floor() as u16),
            (None, _) => None,
        })
        .max()
        .unwrap_or(0);
    worst.saturating_add(margin).clamp(floor, 1000)
}

/// The shipped model from a corpus: its threshold chosen on the held-out
/// half with a model of the other half (the benign lines there that the
/// tier would look at must stay unflagged), then trained on every line.
pub fn train_shipped(examples: &[Example<'_>], for_learned: impl Fn(&str) -> bool) -> ModelFile {
    let half = train(
        examples
            .iter()
            .filter(|e| !held_out(e.source))
            .map(|e| (e.class, e.line)),
        1000,
    );
    let half = Learned::compile(&half).expect("a trained model compiles");
    let benign: Vec<&str> = examples
        .iter()
        .filter(|e| held_out(e.source) && e.class == "benign" && for_learned(e.line))
        .map(|e| e.line)
        .collect();
    let threshold = threshold_for(&half, &benign, THRESHOLD_FLOOR, THRESHOLD_MARGIN);
    train(examples.iter().map(|e| (e.class, e.line)), threshold)
}

/// The threshold is never below this (a coin toss between kinds is not a
/// verdict).
const THRESHOLD_FLOOR: u16 = 600;
/// Kept above the worst held-out benign score.
const THRESHOLD_MARGIN: u16 = 20;

impl ModelFile {
    /// JSON with one feature per line, so a retrained model diffs well.
    pub fn to_json(&self) -> String {
        let json = |v: &[_]| serde_json::to_string(v).expect("serialises");
        let mut out = format!(
            "{{\"classes\":{},\"lines\":{},\"threshold_permille\":{},\"features\":{{",
            serde_json::to_string(&self.classes).expect("serialises"),
            json(&self.lines),
            self.threshold_permille
        );
        for (i, (feature, by)) in self.features.iter().enumerate() {
            out.push_str(if i == 0 { "\n" } else { ",\n" });
            out.push_str(&serde_json::to_string(feature).expect("a string serialises"));
            out.push(':');
            out.push_str(&serde_json::to_string(by).expect("counts serialise"));
        }
        out.push_str("\n}}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_masked_and_pairs_kept() {
        let f = features("NCCL error 12: rank 3 timed-out");
        assert!(f.contains("nccl") && f.contains("timed out") && f.contains("rank #"));
        assert!(!f.iter().any(|w| w.contains('3')));
    }

    #[test]
    fn a_small_model_names_what_it_learned_and_not_below_its_threshold() {
        let examples = [
            (
                "out_of_memory",
                "tried to allocate memory and ran out of memory",
            ),
            ("out_of_memory", "out of memory while allocating buffer"),
            ("benign", "memory usage is fine"),
            ("benign", "allocated buffer of memory"),
        ];
        let model = Learned::compile(&train(examples, 600)).unwrap();
        let guess = model.guess("ran out of memory allocating").unwrap();
        assert_eq!(guess.kind, FailureKind::OutOfMemory);
        assert!(guess.score_permille >= 600);
        assert!(model.guess("memory usage is fine").is_none());
        let strict = Learned::compile(&train(examples, 1000)).unwrap();
        assert!(strict.guess("out of memory").is_none());
    }
}
