//! Why a line was classified as it was (`unicron classify --explain`).

use super::Classified;
use super::{LogRules, RuleKind, Verdict, truncate};

/// Why a line was classified as it was: the rule, the keyword that let the
/// rule be tried, the text its pattern matched and, for an Xid, the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub classified: Classified,
    pub keyword: String,
    pub matched: String,
    pub xid: Option<u32>,
    /// Rules tried first (their keyword was in the line) that did not take
    /// it, each with why: `pattern did not match`, `excluded by unless`, or
    /// an Xid code that maps to no failure.
    pub passed_over: Vec<(String, &'static str)>,
}

impl LogRules {
    /// What [`LogRules::classify`] decided and why; `None` for a line no
    /// rule takes (there is nothing to explain).
    pub fn explain(&self, line: &str) -> Option<Explanation> {
        let classified = self.classify(line)?;
        let Verdict::Failure { rule: chosen, .. } = self.verdict(line) else {
            // Learned: the marker that sent it to the model; no rule took it.
            return Some(Explanation {
                keyword: self.error_marker(line).unwrap_or_default().to_string(),
                matched: String::new(),
                xid: None,
                passed_over: Vec::new(),
                classified,
            });
        };
        let text = truncate(line);
        let mut keyword = None;
        let mut tried = std::collections::BTreeSet::new();
        for m in self.prefilter.find_overlapping_iter(text) {
            let rule = self.keyword_rule[m.pattern().as_usize()];
            tried.insert(rule);
            if rule == chosen && keyword.is_none() {
                keyword = Some(self.keywords[m.pattern().as_usize()].clone());
            }
        }
        let passed_over = tried
            .into_iter()
            .take_while(|&index| index < chosen)
            .map(|index| {
                let rule = &self.rules[index];
                let why = if !rule.regex.is_match(text) {
                    "pattern did not match"
                } else if rule.unless.as_ref().is_some_and(|u| u.is_match(text)) {
                    "excluded by unless"
                } else {
                    "its Xid code maps to no failure"
                };
                (rule.name.clone(), why)
            })
            .collect();
        let rule = &self.rules[chosen];
        let captures = rule.regex.captures(text)?;
        let xid = match rule.kind {
            RuleKind::Xid => captures.name("xid").and_then(|m| m.as_str().parse().ok()),
            RuleKind::Fixed(_) => None,
        };
        Some(Explanation {
            classified,
            keyword: keyword.unwrap_or_default(),
            matched: captures.get(0).map_or("", |m| m.as_str()).to_string(),
            xid,
            passed_over,
        })
    }
}
