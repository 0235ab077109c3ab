//! Log rules: one pass over a line classifies it as a failure kind or benign.
//!
//! All keywords of all rules go into one Aho-Corasick automaton; a line that
//! contains none of them (nearly every line) is benign after that single
//! scan. A line with keyword hits runs only the regexes of the rules whose
//! keywords it contains, in file order, until one matches: one big
//! `RegexSet` of every rule was tried and is far slower once the rules are
//! many and long (it runs them all, on every hit).

use std::collections::BTreeMap;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::Regex;
use serde::Deserialize;

mod explain;
mod tier;

pub use explain::Explanation;

use super::learned::Learned;
use super::markers::{self, ErrorMarkers};
use crate::taxonomy::{FailureKind, Severity};

/// The built-in rules, compiled into the binary.
pub const BUILTIN_RULES: &str = include_str!("../../../rules/log_rules.toml");

/// A rule file that cannot be used, naming the rule and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RulesError {
    #[error("rules file: {0}")]
    Parse(String),
    #[error("rule `{rule}`: field `{field}`: {reason}")]
    Rule {
        rule: String,
        field: &'static str,
        reason: String,
    },
}

/// One rule as written in TOML.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub name: String,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub severity: Option<String>,
    #[serde(default)]
    pub keywords: Vec<String>,
    #[serde(default)]
    pub pattern: Option<String>,
    #[serde(default)]
    pub unless: Option<String>,
    /// In a user file: drop the built-in rule of this name.
    #[serde(default)]
    pub disable: bool,
}

/// A rules file: rules plus the XID code table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesFile {
    #[serde(default, rename = "rule")]
    pub rules: Vec<RuleSpec>,
    /// kind symbol (or `none`, or `default`) → XID codes.
    #[serde(default)]
    pub xid: BTreeMap<String, toml::Value>,
    /// Words and phrases (case-insensitive, whole words), any of which
    /// marks a line as an error report, as does a glog `E`/`F` level: such
    /// a line that no rule takes goes to the learned tier. A user file's
    /// list replaces the built-in one.
    #[serde(default)]
    pub error_markers: Option<Vec<String>>,
    /// Regexes, any of which says a line reports something handled (an
    /// INFO notice, a retry that goes on): never sent to the learned tier.
    #[serde(default)]
    pub handled_markers: Option<Vec<String>>,
    /// Whether the learned tier runs (default: yes).
    #[serde(default)]
    pub learned: Option<bool>,
}

impl RulesFile {
    /// Parses a rules file.
    pub fn parse(text: &str) -> Result<RulesFile, RulesError> {
        toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|span| text[..span.start.min(text.len())].lines().count().max(1));
            // toml's messages may span lines ("invalid table header\nexpected ...")
            let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
            RulesError::Parse(match line {
                Some(line) => format!("line {line}: {message}"),
                None => message,
            })
        })
    }

    /// `self` with `user` layered on top: a user rule replaces the built-in
    /// rule of the same name in place, new rules go first (so they win), and
    /// `disable = true` removes a rule. XID entries override per key.
    pub fn overlay(mut self, user: RulesFile) -> RulesFile {
        let mut prepend = Vec::new();
        for rule in user.rules {
            match self.rules.iter().position(|r| r.name == rule.name) {
                Some(i) if rule.disable => {
                    self.rules.remove(i);
                }
                Some(i) => self.rules[i] = rule,
                None if rule.disable => {}
                None => prepend.push(rule),
            }
        }
        prepend.append(&mut self.rules);
        self.rules = prepend;
        self.xid.extend(user.xid);
        self.error_markers = user.error_markers.or(self.error_markers);
        self.handled_markers = user.handled_markers.or(self.handled_markers);
        self.learned = user.learned.or(self.learned);
        self
    }
}

/// What a rule says about a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A failure of this kind, by this rule.
    Failure {
        kind: FailureKind,
        severity: Severity,
        rule: usize,
    },
    /// A failure of this kind by the learned tier, with its posterior.
    Learned {
        kind: FailureKind,
        severity: Severity,
        score_permille: u16,
    },
    /// An error report no rule takes and the learned tier does not name
    /// (below its threshold, or the tier is off): no failure, but an
    /// unclassified error to surface.
    Unnamed,
    /// Nothing wrong.
    Benign,
}

impl Verdict {
    /// For a line no rule took that carries an error marker: what the
    /// learned tier named, if anything; `None` for a rule's line or a
    /// benign one.
    pub fn unclassified(self) -> Option<Option<(FailureKind, u16)>> {
        match self {
            Verdict::Learned {
                kind,
                score_permille,
                ..
            } => Some(Some((kind, score_permille))),
            Verdict::Unnamed => Some(None),
            Verdict::Failure { .. } | Verdict::Benign => None,
        }
    }
}

/// A classified line with what the rule captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub kind: FailureKind,
    pub severity: Severity,
    pub rule: String,
    pub rank: Option<i32>,
    pub gpu: Option<i32>,
    /// The node the line is about, when it names another (`(?P<node>...)`).
    pub node: Option<String>,
    /// The learned tier's posterior, in thousandths, when it named the
    /// kind (then `rule` is `learned`).
    pub score_permille: Option<u16>,
}

/// The rule name of a learned verdict.
pub const LEARNED_RULE: &str = "learned";

#[derive(Clone)]
enum RuleKind {
    Fixed(FailureKind),
    Xid,
}

#[derive(Clone)]
struct Rule {
    name: String,
    kind: RuleKind,
    severity: Option<Severity>,
    regex: Regex,
    unless: Option<Regex>,
}

/// The compiled rule set.
#[derive(Clone)]
pub struct LogRules {
    rules: Vec<Rule>,
    prefilter: AhoCorasick,
    /// Keyword pattern index → rule index.
    keyword_rule: Vec<usize>,
    /// Keyword pattern index → the literal, for explanations.
    keywords: Vec<String>,
    /// XID code → kind (`None`: benign code).
    xid: BTreeMap<u32, Option<FailureKind>>,
    xid_default: Option<FailureKind>,
    /// Any error marker (`None`: no learned tier).
    markers: Option<ErrorMarkers>,
    /// Any handled marker.
    handled: Option<Regex>,
    /// What the rules are: built-ins, model and site file together.
    version: String,
    learned: Option<Arc<Learned>>,
}

impl std::fmt::Debug for LogRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogRules")
            .field("rules", &self.rules.len())
            .finish()
    }
}

/// Longest line prefix the rules look at; longer lines are truncated (a
/// megabyte line costs no more than this).
pub const MAX_LINE_BYTES: usize = 8 * 1024;

/// Most rules one set may hold (the candidate bitset is fixed-size).
pub const MAX_RULES: usize = 256;

impl LogRules {
    /// The built-in rules.
    pub fn builtin() -> LogRules {
        LogRules::with_user("").expect("built-in rules compile")
    }

    /// The built-in rules with a user file layered on top.
    pub fn with_user(user_toml: &str) -> Result<LogRules, RulesError> {
        let builtin = RulesFile::parse(BUILTIN_RULES).expect("built-in rules parse");
        let mut rules = LogRules::compile(builtin.overlay(RulesFile::parse(user_toml)?))?;
        rules.version = version_of(user_toml);
        Ok(rules)
    }

    /// What these rules are, as 16 hex digits: the same built-in rules,
    /// learned model and site file give the same version (recorded in each
    /// detector round, so replay can tell it applies the same rules).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Compiles a rules file.
    pub fn compile(file: RulesFile) -> Result<LogRules, RulesError> {
        let mut rules = Vec::new();
        let mut keywords = Vec::new();
        let mut keyword_rule = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for spec in file.rules.into_iter().filter(|r| !r.disable) {
            let err = |field: &'static str, reason: String| RulesError::Rule {
                rule: spec.name.clone(),
                field,
                // regex errors draw a caret diagram over several lines
                reason: reason.split_whitespace().collect::<Vec<_>>().join(" "),
            };
            if !names.insert(spec.name.clone()) {
                return Err(err("name", "duplicate rule name".into()));
            }
            let kind_symbol = spec
                .kind
                .as_deref()
                .ok_or_else(|| err("kind", "missing".into()))?;
            let kind = if kind_symbol == "xid" {
                RuleKind::Xid
            } else {
                RuleKind::Fixed(
                    kind_symbol
                        .parse()
                        .map_err(|e: crate::UnknownSymbol| err("kind", e.to_string()))?,
                )
            };
            let severity = spec
                .severity
                .as_deref()
                .map(|s| {
                    s.parse()
                        .map_err(|e: crate::UnknownSymbol| err("severity", e.to_string()))
                })
                .transpose()?;
            let pattern = spec
                .pattern
                .clone()
                .ok_or_else(|| err("pattern", "missing".into()))?;
            let regex = Regex::new(&pattern).map_err(|e| err("pattern", e.to_string()))?;
            if matches!(kind, RuleKind::Xid) && !regex.capture_names().any(|n| n == Some("xid")) {
                return Err(err(
                    "pattern",
                    "kind `xid` needs a `(?P<xid>...)` group".into(),
                ));
            }
            let unless = spec
                .unless
                .as_deref()
                .map(Regex::new)
                .transpose()
                .map_err(|e| err("unless", e.to_string()))?;
            if spec.keywords.is_empty() || spec.keywords.iter().any(|k| k.is_empty()) {
                return Err(err(
                    "keywords",
                    "needs at least one non-empty literal (the prefilter)".into(),
                ));
            }
            for keyword in &spec.keywords {
                keywords.push(keyword.clone());
                keyword_rule.push(rules.len());
            }
            rules.push(Rule {
                name: spec.name,
                kind,
                severity,
                regex,
                unless,
            });
        }
        if rules.len() > MAX_RULES {
            return Err(RulesError::Parse(format!(
                "{} rules; at most {MAX_RULES} are supported",
                rules.len()
            )));
        }
        let prefilter = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(&keywords)
            .map_err(|e| RulesError::Parse(format!("keywords: {e}")))?;
        let (xid, xid_default) = xid_table(&file.xid)?;
        let markers = match &file.error_markers {
            Some(markers) if !markers.is_empty() => Some(ErrorMarkers::new(markers).map_err(
                |reason| RulesError::Rule {
                    rule: "error_markers".into(),
                    field: "error_markers",
                    reason,
                },
            )?),
            _ => None,
        };
        let handled = match &file.handled_markers {
            Some(handled) if !handled.is_empty() => {
                Some(markers::any_of(handled).map_err(|reason| RulesError::Rule {
                    rule: "handled_markers".into(),
                    field: "handled_markers",
                    reason,
                })?)
            }
            _ => None,
        };
        Ok(LogRules {
            rules,
            prefilter,
            keyword_rule,
            keywords,
            xid,
            xid_default,
            learned: file
                .learned
                .unwrap_or(true)
                .then(|| Arc::new(Learned::builtin())),
            markers,
            handled,
            version: String::new(),
        })
    }

    /// Number of compiled rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The kind an XID code maps to (`None`: benign).
    pub fn xid_kind(&self, code: u32) -> Option<FailureKind> {
        self.xid.get(&code).copied().unwrap_or(self.xid_default)
    }

    /// The verdict for one line, without captures (the hot path).
    pub fn verdict(&self, line: &str) -> Verdict {
        let line = truncate(line);
        let mut candidates = [0u64; MAX_RULES / 64];
        let mut any = false;
        for m in self.prefilter.find_overlapping_iter(line) {
            let rule = self.keyword_rule[m.pattern().as_usize()];
            candidates[rule / 64] |= 1 << (rule % 64);
            any = true;
        }
        if !any {
            return self.learned_verdict(line);
        }
        let candidates = candidates.iter().enumerate().flat_map(|(word, bits)| {
            (0..64)
                .filter(move |bit| bits & (1 << bit) != 0)
                .map(move |bit| word * 64 + bit)
        });
        for index in candidates {
            let rule = &self.rules[index];
            if !rule.regex.is_match(line) {
                continue;
            }
            if rule.unless.as_ref().is_some_and(|u| u.is_match(line)) {
                continue;
            }
            let kind = match rule.kind {
                RuleKind::Fixed(kind) => Some(kind),
                RuleKind::Xid => rule
                    .regex
                    .captures(line)
                    .and_then(|c| c.name("xid")?.as_str().parse().ok())
                    .and_then(|code| self.xid_kind(code)),
            };
            if let Some(kind) = kind {
                return Verdict::Failure {
                    kind,
                    severity: rule.severity.unwrap_or(kind.default_severity()),
                    rule: index,
                };
            }
        }
        self.learned_verdict(line)
    }

    /// Classifies one line; `None` when benign.
    pub fn classify(&self, line: &str) -> Option<Classified> {
        self.classify_verdict(line, self.verdict(line))
    }

    /// [`LogRules::classify`] of a line whose [`LogRules::verdict`] the
    /// caller already has.
    pub fn classify_verdict(&self, line: &str, verdict: Verdict) -> Option<Classified> {
        let (kind, severity, rule) = match verdict {
            Verdict::Benign | Verdict::Unnamed => return None,
            Verdict::Learned {
                kind,
                severity,
                score_permille,
            } => {
                return Some(Classified {
                    kind,
                    severity,
                    rule: LEARNED_RULE.into(),
                    rank: None,
                    gpu: None,
                    node: None,
                    score_permille: Some(score_permille),
                });
            }
            Verdict::Failure {
                kind,
                severity,
                rule,
            } => (kind, severity, rule),
        };
        let rule = &self.rules[rule];
        let captures = rule.regex.captures(truncate(line));
        let number =
            |name: &str| -> Option<i32> { captures.as_ref()?.name(name)?.as_str().parse().ok() };
        Some(Classified {
            kind,
            severity,
            rule: rule.name.clone(),
            rank: number("rank"),
            gpu: number("gpu"),
            node: captures
                .as_ref()
                .and_then(|c| c.name("node"))
                .map(|m| m.as_str().to_string()),
            score_permille: None,
        })
    }
}

/// FNV-1a over the built-in rules, the learned model and `user`.
fn version_of(user: &str) -> String {
    use super::learned::{FNV_OFFSET, fnv1a};
    let hash = [BUILTIN_RULES, super::learned::BUILTIN_MODEL, user]
        .into_iter()
        .fold(FNV_OFFSET, |hash, part| {
            fnv1a(hash, part.bytes().chain([0xff]))
        });
    format!("{hash:016x}")
}

fn truncate(line: &str) -> &str {
    if line.len() <= MAX_LINE_BYTES {
        return line;
    }
    let mut end = MAX_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

type XidTable = (BTreeMap<u32, Option<FailureKind>>, Option<FailureKind>);

fn xid_table(spec: &BTreeMap<String, toml::Value>) -> Result<XidTable, RulesError> {
    let err = |reason: String| RulesError::Rule {
        rule: "xid".into(),
        field: "xid",
        reason,
    };
    let parse_kind = |symbol: &str| -> Result<Option<FailureKind>, RulesError> {
        if symbol == "none" {
            Ok(None)
        } else {
            symbol
                .parse()
                .map(Some)
                .map_err(|e: crate::UnknownSymbol| err(e.to_string()))
        }
    };
    let mut table = BTreeMap::new();
    let mut default = Some(FailureKind::Unknown);
    for (key, value) in spec {
        if key == "default" {
            let symbol = value
                .as_str()
                .ok_or_else(|| err("`default` must be a kind symbol".into()))?;
            default = parse_kind(symbol)?;
            continue;
        }
        let kind = parse_kind(key)?;
        let codes = value
            .as_array()
            .ok_or_else(|| err(format!("`{key}` must be a list of codes")))?;
        for code in codes {
            let code = code
                .as_integer()
                .and_then(|c| u32::try_from(c).ok())
                .ok_or_else(|| err(format!("`{key}`: {code} is not an XID code")))?;
            table.insert(code, kind);
        }
    }
    Ok((table, default))
}
