//! `unicron classify`: the detector's log rules over stdin, one JSON object
//! per input line, so operators can test a rule change against their logs.

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use serde::Serialize;
use unicron_core::detector::LogRules;

use crate::config::Config;
use crate::usage::UsageError;

#[derive(Serialize)]
struct Verdict<'a> {
    kind: &'a str,
    severity: Option<&'a str>,
    rule: Option<&'a str>,
    /// With `--explain`, for a classified line only.
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<Why<'a>>,
}

/// Why a rule took a line (`--explain`).
#[derive(Serialize)]
struct Why<'a> {
    keyword: &'a str,
    matched: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    xid: Option<u32>,
    passed_over: Vec<PassedOver<'a>>,
}

#[derive(Serialize)]
struct PassedOver<'a> {
    rule: &'a str,
    why: &'a str,
}

pub fn run(config: &Config, rules: Option<PathBuf>, explain: bool) -> anyhow::Result<()> {
    let mut settings = config.detector.clone();
    if rules.is_some() {
        settings.rules_file = rules;
    }
    let rules = settings
        .rules()
        .map_err(|e| UsageError(e.to_string().replace("detector.rules_file", "--rules")))?;
    classify(
        &rules,
        explain,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    )
}

/// One output line per input line, in order; invalid UTF-8 is read lossily.
fn classify(
    rules: &LogRules,
    explain: bool,
    input: impl BufRead,
    output: impl Write,
) -> anyhow::Result<()> {
    let mut out = BufWriter::new(output);
    for line in input.split(b'\n') {
        let bytes = line?;
        let text = String::from_utf8_lossy(&bytes);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        let found = rules.classify(text);
        let explained = if explain && found.is_some() {
            rules.explain(text)
        } else {
            None
        };
        let verdict = match &found {
            Some(c) => Verdict {
                kind: c.kind.symbol(),
                severity: Some(c.severity.symbol()),
                rule: Some(&c.rule),
                why: explained.as_ref().map(|e| Why {
                    keyword: &e.keyword,
                    matched: &e.matched,
                    xid: e.xid,
                    passed_over: e
                        .passed_over
                        .iter()
                        .map(|(rule, why)| PassedOver { rule, why })
                        .collect(),
                }),
            },
            None => Verdict {
                kind: "none",
                severity: None,
                rule: None,
                why: None,
            },
        };
        serde_json::to_writer(&mut out, &verdict)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_json_object_per_line_in_order() {
        let input = "NCCL INFO Init COMPLETE\nRuntimeError: CUDA error: an illegal memory access was encountered\r\n\nkernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.";
        let mut out = Vec::new();
        classify(&LogRules::builtin(), false, input.as_bytes(), &mut out).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[0],
            serde_json::json!({"kind": "none", "severity": null, "rule": null})
        );
        assert_eq!(lines[1]["kind"], "illegal_memory_access");
        assert_eq!(lines[1]["severity"], "SEV2");
        assert_eq!(lines[2]["kind"], "none");
        assert_eq!(lines[3]["kind"], "gpu_driver_error");
        assert_eq!(lines[3]["rule"], "nvrm.xid");
    }

    #[test]
    fn explain_says_why_for_a_classified_line_and_nothing_for_a_benign_one() {
        let input = "NCCL INFO Init COMPLETE\nkernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.";
        let mut out = Vec::new();
        classify(&LogRules::builtin(), true, input.as_bytes(), &mut out).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[0],
            serde_json::json!({"kind": "none", "severity": null, "rule": null})
        );
        assert_eq!(lines[1]["rule"], "nvrm.xid");
        assert_eq!(lines[1]["why"]["keyword"], "xid");
        assert_eq!(lines[1]["why"]["matched"], "NVRM: Xid (PCI:0000:3b:00): 79");
        assert_eq!(lines[1]["why"]["xid"], 79);
    }
}
