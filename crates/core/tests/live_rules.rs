//! Rules changed while the detector runs: a round that carries a site's
//! rules file switches the detector to it before its records, replay of
//! the recorded rounds applies the same rules at the same round, and a
//! replay whose rules differ from those a round was applied with says so.

use std::collections::BTreeMap;

use unicron_core::detector::{
    Detector, DetectorConfig, DetectorInput, DetectorOutput, LogRules, Observation, SourceRecord,
};
use unicron_core::replay::{SourcedObservation, by_record, replay_rounds};
use unicron_core::*;

const T0: i64 = 1_767_225_600_000;
const LOGS: &str = "unicron.logs";
const LINE: &str = "bmc: chassis fan 3 stopped spinning";
const SITE_RULES: &str = r#"
[[rule]]
name = "site.fan_stopped"
kind = "gpu_driver_error"
keywords = ["fan"]
pattern = 'fan \d+ stopped'
"#;

fn detector() -> Detector {
    Detector::new(DetectorConfig::default(), LogRules::builtin())
}

fn record(offset: i64, node: &str) -> SourcedObservation {
    SourcedObservation {
        source: SourceRecord {
            topic: LOGS.into(),
            partition: 0,
            offset,
            index: 0,
        },
        observation: Observation::Log(LogRecord {
            cluster: "c1".into(),
            node: node.into(),
            time_ms: T0 + offset * 1000,
            source: "syslog".into(),
            job: None,
            rank: None,
            gpu: None,
            line: LINE.into(),
            attributes: BTreeMap::new(),
        }),
    }
}

/// Applies one round of one record, as the live service does: the rules
/// it carries, then its version recorded.
fn live_round(
    d: &mut Detector,
    seq: i64,
    rules: Option<&str>,
    r: &SourcedObservation,
) -> (DetectorRound, Vec<FailureEvent>) {
    let mut round = DetectorRound {
        detector: "d-1".into(),
        seq,
        ranges: vec![RoundRange {
            topic: LOGS.into(),
            partition: 0,
            first_offset: r.source.offset,
            last_offset: r.source.offset,
            last_caught_up: true,
        }],
        rules: rules.map(str::to_string),
        ..DetectorRound::default()
    };
    let input = DetectorInput {
        source: r.source.clone(),
        observation: r.observation.clone(),
        caught_up: true,
    };
    let failures: Vec<FailureEvent> = d
        .apply_round(&round, vec![input])
        .into_iter()
        .filter_map(|o| match o.output {
            DetectorOutput::Failure(f) => Some(f),
            DetectorOutput::Rejected(_) => None,
        })
        .collect();
    round.rules_version = d.rules().version().to_string();
    round.failures = failures.iter().map(|f| f.id.clone()).collect();
    (round, failures)
}

#[test]
fn a_round_that_carries_new_rules_switches_the_detector_and_replay_follows() {
    let records = [record(0, "n1"), record(1, "n2")];
    let mut live = detector();
    let builtin_version = live.rules().version().to_string();
    let (first, none) = live_round(&mut live, 0, Some(""), &records[0]);
    assert!(none.is_empty(), "no built-in rule knows the line: {none:?}");
    let (second, found) = live_round(&mut live, 1, Some(SITE_RULES), &records[1]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, FailureKind::GpuDriverError);
    assert_eq!(found[0].rule.as_deref(), Some("site.fan_stopped"));
    assert_eq!(first.rules_version, builtin_version);
    assert_ne!(second.rules_version, builtin_version);
    assert_eq!(
        second.rules_version,
        LogRules::with_user(SITE_RULES).unwrap().version()
    );

    let observations = by_record(&records);
    let rounds = vec![first.clone(), second.clone()];
    let replayed = replay_rounds(&rounds, &observations, &found, detector, |_| true);
    assert_eq!(replayed.comparison.diverged, 0, "{:?}", replayed.comparison);
    assert_eq!(replayed.failures, found);

    // A log whose rounds lost the rules text: replay cannot apply what the
    // live detector applied, and says which round and which versions.
    let stripped = vec![
        first,
        DetectorRound {
            rules: None,
            ..second
        },
    ];
    let replayed = replay_rounds(&stripped, &observations, &found, detector, |_| true);
    // The rules first, then the failure the round named and replay lacks.
    assert_eq!(replayed.comparison.diverged, 2, "{:?}", replayed.comparison);
    let first = replayed.comparison.first_divergence.expect("a divergence");
    assert_eq!((first.what.as_str(), first.id.as_str()), ("rules", "d-1#1"));
}

#[test]
fn a_rules_file_that_does_not_compile_keeps_the_rules_in_use() {
    let mut live = detector();
    let (_, _) = live_round(&mut live, 0, Some(SITE_RULES), &record(0, "n1"));
    let version = live.rules().version().to_string();
    let (round, found) = live_round(&mut live, 1, Some("[[rule]]\nname = 3\n"), &record(1, "n2"));
    assert_eq!(round.rules_version, version);
    assert_eq!(found.len(), 1, "the site rule still applies: {found:?}");
}

/// An error line no rule names is surfaced: the detector groups it by
/// template for the round, and the status view folds rounds into its list
/// of unclassified errors, newest first.
#[test]
fn error_lines_no_rule_names_are_grouped_for_the_status_page() {
    let mut d = detector();
    let line = |offset: i64, node: &str, text: &str| {
        let mut r = record(offset, node);
        if let Observation::Log(log) = &mut r.observation {
            log.line = text.into();
        }
        r
    };
    let mut rounds = Vec::new();
    for (offset, node, text) in [
        (0, "n1", "bmc: psu 2 failed to respond"),
        (1, "n2", "bmc: psu 7 failed to respond"),
        (2, "n1", "bmc: all psus fine"),
    ] {
        let (mut round, _) = live_round(&mut d, offset, None, &line(offset, node, text));
        round.unclassified = d.take_unclassified();
        rounds.push(round);
    }
    assert_eq!(rounds[0].unclassified.len(), 1);
    let first = &rounds[0].unclassified[0];
    assert_eq!(
        (first.cluster.as_str(), first.template.as_str(), first.count),
        ("c1", "bmc: psu <*> failed to respond", 1)
    );
    assert!(rounds[2].unclassified.is_empty(), "no error marker: benign");

    let mut view = unicron_core::status::StatusView::new(Default::default());
    for round in &rounds {
        view.apply_round(round);
    }
    let listed = view.unclassified(Some("c1"), 10);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].count, 2);
    assert_eq!(listed[0].nodes, ["n1", "n2"]);
    assert_eq!((listed[0].first_ms, listed[0].last_ms), (T0, T0 + 1000));
    assert!(view.unclassified(Some("c2"), 10).is_empty());
}

/// However many clusters flood unclassified errors, one round records at
/// most `ROUND_UNCLASSIFIED` templates, the most frequent first.
#[test]
fn a_flood_of_unclassified_errors_keeps_a_round_small() {
    let mut d = detector();
    let mut offset = 0;
    for cluster in ["c1", "c2", "c3"] {
        for family in 0..30 {
            // Family 0 of each cluster twice: the most frequent.
            for _ in 0..if family == 0 { 2 } else { 1 } {
                let mut r = record(offset, "n1");
                if let Observation::Log(log) = &mut r.observation {
                    log.cluster = cluster.into();
                    log.line = format!("widget {} failed", "x".repeat(family + 1));
                }
                live_round(&mut d, offset, None, &r);
                offset += 1;
            }
        }
    }
    let taken = d.take_unclassified();
    assert_eq!(taken.len(), unicron_core::detector::ROUND_UNCLASSIFIED);
    assert!(taken[..3].iter().all(|t| t.count == 2), "{:?}", &taken[..3]);
    assert!(d.take_unclassified().is_empty(), "taken once");
}
