//! Unclassified errors grouped by template: lines that carry an error
//! marker and that no rule takes, with their variable tokens masked, so a
//! site sees in minutes which of its failures unicron cannot name (one
//! template per message family, not one entry per line). Bounded: at most
//! `max` templates; a new one past that pushes out the least seen (oldest
//! first), and the pushed-out count is kept.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::taxonomy::FailureKind;

/// Tokens of a template at most; the rest is cut (`…`).
const MAX_TOKENS: usize = 40;
/// Bytes of a template's example line at most.
const EXAMPLE_BYTES: usize = 512;
/// Nodes and jobs named per template at most (the counts go on).
const NAMED: usize = 8;

/// Templates a detector keeps per cluster and round.
pub const PER_ROUND: usize = 32;

/// What stands for a masked token.
pub const MASK: &str = "<*>";

/// The template of a line: whitespace-separated tokens, each holding a
/// digit masked (numbers, addresses, ids, timestamps), runs of masks
/// collapsed, at most [`MAX_TOKENS`] tokens.
pub fn template_of(line: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for token in line.split_whitespace() {
        let token = if token.bytes().any(|b| b.is_ascii_digit()) {
            MASK
        } else {
            token
        };
        if token == MASK && out.last() == Some(&MASK) {
            continue;
        }
        if out.len() == MAX_TOKENS {
            out.push("…");
            break;
        }
        out.push(token);
    }
    out.join(" ")
}

/// One template and what was seen of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Template {
    pub template: String,
    pub count: u64,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Up to [`NAMED`] nodes, and how many there were.
    pub nodes: BTreeSet<String>,
    pub node_count: u64,
    pub jobs: BTreeSet<String>,
    /// The first line seen, cut to [`EXAMPLE_BYTES`].
    pub example: String,
    /// What the learned tier made of the example, if it named a kind.
    pub learned: Option<(FailureKind, u16)>,
}

/// One unclassified error line.
#[derive(Debug, Clone, Copy)]
pub struct Sighting<'a> {
    pub line: &'a str,
    pub node: &'a str,
    pub job: Option<&'a str>,
    pub time_ms: i64,
    pub learned: Option<(FailureKind, u16)>,
}

/// A cluster's templates of one round: at most [`PER_ROUND`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundTemplates(pub Templates);

impl Default for RoundTemplates {
    fn default() -> RoundTemplates {
        RoundTemplates(Templates::new(PER_ROUND))
    }
}

impl Template {
    /// As a round records it.
    pub fn to_record(&self, cluster: &str) -> crate::records::UnclassifiedTemplate {
        crate::records::UnclassifiedTemplate {
            cluster: cluster.to_string(),
            template: self.template.clone(),
            count: self.count as i64,
            first_ms: self.first_ms,
            last_ms: self.last_ms,
            nodes: self.nodes.iter().cloned().collect(),
            jobs: self.jobs.iter().cloned().collect(),
            example: self.example.clone(),
            learned: self.learned.map(|(kind, _)| kind.symbol().to_string()),
            score_permille: self.learned.map_or(0, |(_, s)| i32::from(s)),
        }
    }

    /// From a round's record (an unknown kind symbol is dropped).
    pub fn from_record(r: &crate::records::UnclassifiedTemplate) -> Template {
        Template {
            template: r.template.clone(),
            count: r.count.max(0) as u64,
            first_ms: r.first_ms,
            last_ms: r.last_ms,
            node_count: r.nodes.len() as u64,
            nodes: r.nodes.iter().take(NAMED).cloned().collect(),
            jobs: r.jobs.iter().take(NAMED).cloned().collect(),
            example: cut(&r.example, EXAMPLE_BYTES).to_string(),
            learned: r
                .learned
                .as_deref()
                .and_then(|k| k.parse().ok())
                .map(|kind| {
                    (
                        kind,
                        u16::try_from(r.score_permille.clamp(0, 1000)).unwrap_or(0),
                    )
                }),
        }
    }
}

/// Templates by their text, bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Templates {
    max: usize,
    by_text: BTreeMap<String, Template>,
    /// Templates pushed out to stay within `max`.
    pub evicted: u64,
}

impl Templates {
    pub fn new(max: usize) -> Templates {
        Templates {
            max: max.max(1),
            by_text: BTreeMap::new(),
            evicted: 0,
        }
    }

    /// Takes every template out, by text, and starts again.
    pub fn drain(&mut self) -> Vec<Template> {
        self.evicted = 0;
        std::mem::take(&mut self.by_text).into_values().collect()
    }

    /// Counts a template already counted elsewhere (a round's, folded
    /// into a longer view): its count, times, nodes and jobs.
    pub fn merge(&mut self, other: &Template) {
        let mut nodes = other.nodes.iter();
        let first = nodes.next().map_or("-", String::as_str);
        self.add_as(
            other.template.clone(),
            Sighting {
                line: &other.example,
                node: first,
                job: other.jobs.iter().next().map(String::as_str),
                time_ms: other.first_ms,
                learned: other.learned,
            },
        );
        let Some(entry) = self.by_text.get_mut(&other.template) else {
            return;
        };
        entry.count += other.count.saturating_sub(1);
        entry.last_ms = entry.last_ms.max(other.last_ms);
        for node in nodes {
            if entry.nodes.insert(node.clone()) {
                entry.node_count += 1;
            }
        }
        entry.nodes = entry.nodes.iter().take(NAMED).cloned().collect();
        entry.jobs.extend(other.jobs.iter().cloned());
        entry.jobs = entry.jobs.iter().take(NAMED).cloned().collect();
    }

    pub fn len(&self) -> usize {
        self.by_text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_text.is_empty()
    }

    /// Counts one line under its template.
    pub fn add(&mut self, seen: Sighting<'_>) {
        self.add_as(template_of(seen.line), seen);
    }

    fn add_as(&mut self, text: String, seen: Sighting<'_>) {
        if !self.by_text.contains_key(&text) && self.by_text.len() >= self.max {
            // The least seen, then the longest unseen, then by text: the
            // same inputs push out the same template.
            let out = self
                .by_text
                .values()
                .min_by(|a, b| {
                    (a.count, a.last_ms, &a.template).cmp(&(b.count, b.last_ms, &b.template))
                })
                .map(|t| t.template.clone())
                .expect("full, so not empty");
            self.by_text.remove(&out);
            self.evicted += 1;
        }
        let entry = self
            .by_text
            .entry(text.clone())
            .or_insert_with(|| Template {
                template: text,
                count: 0,
                first_ms: seen.time_ms,
                last_ms: seen.time_ms,
                nodes: BTreeSet::new(),
                node_count: 0,
                jobs: BTreeSet::new(),
                example: cut(seen.line, EXAMPLE_BYTES).to_string(),
                learned: seen.learned,
            });
        entry.count += 1;
        entry.first_ms = entry.first_ms.min(seen.time_ms);
        entry.last_ms = entry.last_ms.max(seen.time_ms);
        if !entry.nodes.contains(seen.node) {
            entry.node_count += 1;
            if entry.nodes.len() < NAMED {
                entry.nodes.insert(seen.node.to_string());
            }
        }
        if let Some(job) = seen.job
            && entry.jobs.len() < NAMED
        {
            entry.jobs.insert(job.to_string());
        }
    }

    /// Most seen first (then newest, then by text).
    pub fn most_frequent(&self) -> Vec<&Template> {
        let mut all: Vec<&Template> = self.by_text.values().collect();
        all.sort_by(|a, b| {
            (b.count, b.last_ms, &a.template).cmp(&(a.count, a.last_ms, &b.template))
        });
        all
    }

    /// Newest first (then most seen, then by text).
    pub fn newest(&self) -> Vec<&Template> {
        let mut all: Vec<&Template> = self.by_text.values().collect();
        all.sort_by(|a, b| {
            (b.last_ms, b.count, &a.template).cmp(&(a.last_ms, a.count, &b.template))
        });
        all
    }
}

fn cut(line: &str, at: usize) -> &str {
    if line.len() <= at {
        return line;
    }
    let end = (0..=at)
        .rev()
        .find(|&i| line.is_char_boundary(i))
        .unwrap_or(0);
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen<'a>(line: &'a str, node: &'a str, time_ms: i64) -> Sighting<'a> {
        Sighting {
            line,
            node,
            job: Some("j"),
            time_ms,
            learned: None,
        }
    }

    #[test]
    fn lines_of_one_family_share_a_template() {
        assert_eq!(
            template_of("2026-01-01 12:00:01 node7 xe 0000:2b:00.0: Timedout job: seqno=1484958"),
            "<*> xe <*> Timedout job: <*>"
        );
        assert_eq!(
            template_of("E1205 rank 3 failed: bad thing"),
            template_of("E1206 rank 12 failed: bad thing")
        );
    }

    #[test]
    fn counts_nodes_and_times_and_stays_within_its_bound() {
        let mut t = Templates::new(2);
        t.add(seen("disk 1 failed", "n1", 10));
        t.add(seen("disk 2 failed", "n2", 5));
        t.add(seen("fan error", "n1", 20));
        let top = t.most_frequent();
        assert_eq!(top[0].template, "disk <*> failed");
        assert_eq!((top[0].count, top[0].first_ms, top[0].last_ms), (2, 5, 10));
        assert_eq!(top[0].node_count, 2);
        assert_eq!(t.newest()[0].template, "fan error");
        // Full: the least seen goes (the fan line), not the busier one.
        t.add(seen("psu error", "n3", 30));
        assert_eq!(t.len(), 2);
        assert_eq!(t.evicted, 1);
        assert!(t.most_frequent().iter().all(|x| x.template != "fan error"));
    }
}
