//! `unicron classify`: the detector's log rules over stdin, one JSON object
//! per input line, so operators can test a rule change against their logs.

use std::collections::BTreeMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use serde::Serialize;
use unicron_core::detector::templates::{Sighting, Templates};
use unicron_core::detector::{LogRules, learned};
use unicron_core::{LogRecord, UnclassifiedTemplate};

use crate::config::Config;
use crate::usage::UsageError;

#[derive(Serialize)]
struct Verdict<'a> {
    kind: &'a str,
    severity: Option<&'a str>,
    rule: Option<&'a str>,
    /// The learned tier's posterior, when it named the kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f64>,
    /// With `--explain`, for a classified line only.
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<Why<'a>>,
}

/// Why a rule took a line (`--explain`); for a learned verdict, the
/// error marker that sent the line to the model.
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

pub fn run(
    config: &Config,
    rules: Option<PathBuf>,
    explain: bool,
    templates: bool,
    from_archive: Option<PathBuf>,
) -> anyhow::Result<()> {
    let mut settings = config.detector.clone();
    if rules.is_some() {
        settings.rules_file = rules;
    }
    let rules = settings
        .rules()
        .map_err(|e| UsageError(e.to_string().replace("detector.rules_file", "--rules")))?;
    if let Some(dir) = from_archive {
        let topic = config.kafka.topic("logs");
        let records = unicron_codec::archive::read_topic::<LogRecord>(&dir, &topic)
            .map_err(|e| UsageError(format!("--from-archive: {}: {e}", dir.display())))?;
        return archive_templates(
            &rules,
            records.iter().map(|a| &a.record),
            std::io::stdout().lock(),
        );
    }
    if templates {
        return group_templates(&rules, std::io::stdin().lock(), std::io::stdout().lock());
    }
    classify(
        &rules,
        explain,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    )
}

/// `unicron train-classifier`: the learned tier from a corpus, its
/// threshold chosen on the corpus's held-out half.
pub fn train(corpus: &std::path::Path, out: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(corpus)
        .map_err(|e| UsageError(format!("--corpus: {}: {e}", corpus.display())))?;
    let examples = learned::corpus(&text)
        .map_err(|e| UsageError(format!("--corpus: {}: {e}", corpus.display())))?;
    let rules = LogRules::builtin();
    let model = learned::train_shipped(&examples, |line| rules.for_learned(line));
    std::fs::write(out, model.to_json())
        .map_err(|e| UsageError(format!("--out: {}: {e}", out.display())))?;
    eprintln!(
        "{} lines, {} features, threshold {:.3}: wrote {}",
        examples.len(),
        model.features.len(),
        f64::from(model.threshold_permille) / 1000.0,
        out.display()
    );
    Ok(())
}

/// Most templates kept for `--templates`.
const MAX_TEMPLATES: usize = 10_000;

/// One template as `--templates` prints it: line numbers stand for time.
#[derive(Serialize)]
struct TemplateLine<'a> {
    template: &'a str,
    count: u64,
    first_line: i64,
    last_line: i64,
    example: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    learned: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f64>,
}

/// The error-marked lines no rule takes in an archive's log records, by
/// cluster and template, most frequent first: each as the detector
/// records it in its rounds (`UnclassifiedTemplate`).
fn archive_templates<'a>(
    rules: &LogRules,
    records: impl Iterator<Item = &'a LogRecord>,
    output: impl Write,
) -> anyhow::Result<()> {
    let mut by_cluster: BTreeMap<&str, Templates> = BTreeMap::new();
    for r in records {
        if let Some(learned) = rules.unclassified_error(&r.line) {
            by_cluster
                .entry(&r.cluster)
                .or_insert_with(|| Templates::new(MAX_TEMPLATES))
                .add(Sighting {
                    line: &r.line,
                    node: &r.node,
                    job: r.job.as_deref(),
                    time_ms: r.time_ms,
                    learned,
                });
        }
    }
    let mut all: Vec<UnclassifiedTemplate> = by_cluster
        .iter()
        .flat_map(|(cluster, t)| t.most_frequent().into_iter().map(|t| t.to_record(cluster)))
        .collect();
    all.sort_by(|a, b| {
        (b.count, b.last_ms, &a.cluster, &a.template).cmp(&(
            a.count,
            a.last_ms,
            &b.cluster,
            &b.template,
        ))
    });
    let mut out = BufWriter::new(output);
    for t in &all {
        serde_json::to_writer(&mut out, t)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    let evicted: u64 = by_cluster.values().map(|t| t.evicted).sum();
    if evicted > 0 {
        eprintln!("{evicted} templates left out past the first {MAX_TEMPLATES} of a cluster");
    }
    Ok(())
}

/// The error-marked lines no rule takes, by template, most frequent first.
fn group_templates(
    rules: &LogRules,
    input: impl BufRead,
    output: impl Write,
) -> anyhow::Result<()> {
    let mut grouped = Templates::new(MAX_TEMPLATES);
    for (number, line) in input.split(b'\n').enumerate() {
        let bytes = line?;
        let text = String::from_utf8_lossy(&bytes);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        if let Some(learned) = rules.unclassified_error(text) {
            grouped.add(Sighting {
                line: text,
                node: "-",
                job: None,
                time_ms: number as i64 + 1,
                learned,
            });
        }
    }
    let mut out = BufWriter::new(output);
    for t in grouped.most_frequent() {
        let line = TemplateLine {
            template: &t.template,
            count: t.count,
            first_line: t.first_ms,
            last_line: t.last_ms,
            example: &t.example,
            learned: t.learned.map(|(kind, _)| kind.symbol()),
            score: t.learned.map(|(_, s)| f64::from(s) / 1000.0),
        };
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    if grouped.evicted > 0 {
        eprintln!(
            "{} templates left out past the first {MAX_TEMPLATES}",
            grouped.evicted
        );
    }
    Ok(())
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
                score: c.score_permille.map(|s| f64::from(s) / 1000.0),
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
                score: None,
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

    #[test]
    fn archived_lines_group_by_cluster_with_nodes_jobs_and_times() {
        let record = |cluster: &str, node: &str, time_ms: i64, line: &str| LogRecord {
            cluster: cluster.into(),
            node: node.into(),
            time_ms,
            source: "agent".into(),
            job: Some("j1".into()),
            rank: None,
            gpu: None,
            line: line.into(),
            attributes: Default::default(),
        };
        let records = [
            record("a", "n1", 1_000, "disk 1 failed on node7"),
            record("a", "n2", 2_000, "disk 2 failed on node8"),
            record("b", "m1", 1_500, "disk 3 failed on node9"),
            record("a", "n1", 3_000, "NCCL INFO all fine"),
        ];
        let mut out = Vec::new();
        archive_templates(&LogRules::builtin(), records.iter(), &mut out).unwrap();
        let got: Vec<UnclassifiedTemplate> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary: Vec<_> = got
            .iter()
            .map(|t| {
                (
                    t.cluster.as_str(),
                    t.count,
                    t.first_ms,
                    t.last_ms,
                    t.nodes.clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "a",
                    2,
                    1_000,
                    2_000,
                    vec!["n1".to_string(), "n2".to_string()]
                ),
                ("b", 1, 1_500, 1_500, vec!["m1".to_string()]),
            ]
        );
        assert_eq!(got[0].jobs, ["j1"]);
        assert_eq!(got[0].template, "disk <*> failed on <*>");
    }

    #[test]
    fn templates_group_unclassified_error_lines_most_frequent_first() {
        let input = "disk 1 failed on node7\nNCCL INFO all fine\ndisk 2 failed on node7\nRuntimeError: CUDA error: an illegal memory access was encountered\nwidget exploded: error 5\n";
        let mut out = Vec::new();
        group_templates(&LogRules::builtin(), input.as_bytes(), &mut out).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // The CUDA line is a rule's, the INFO line no error: two templates.
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["template"], "disk <*> failed on <*>");
        assert_eq!(lines[0]["count"], 2);
        assert_eq!(
            (
                lines[0]["first_line"].as_i64(),
                lines[0]["last_line"].as_i64()
            ),
            (Some(1), Some(3))
        );
        assert_eq!(lines[1]["template"], "widget exploded: error <*>");
    }
}
