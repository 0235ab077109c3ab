//! Replay: re-derive every failure, decision and command from the recorded
//! inputs and compare; or, with another policy or configuration, show what
//! it would have done instead (docs/replay.md).

use std::collections::BTreeSet;

use serde::Serialize;
use unicron_core::FailureEvent;
use unicron_core::detector::{Detector, DetectorConfig, LogRules};
use unicron_core::planner::{POLICY_VERSION, Planner, PlannerConfig, PolicyName};
use unicron_core::replay::{
    self, CommandDiff, Comparison, RecordedStep, by_record, compare_failures, detect_in_order,
    replay_planner, replay_rounds,
};
use unicron_core::signing::CommandSigner;

use crate::history::History;

/// A detector and a planner configuration to replay with.
pub struct Setup {
    pub planner: PlannerConfig,
    pub detector: DetectorConfig,
    pub rules: LogRules,
}

/// What to replay and compare.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only this cluster.
    pub cluster: Option<String>,
    /// Compare only decisions and failures at or after this time (ms).
    pub since: Option<i64>,
    /// Compare only decisions and failures before this time (ms).
    pub until: Option<i64>,
    /// What-if: replay the planner's inputs with this policy instead.
    pub policy: Option<PolicyName>,
    /// Topics the history cannot hold: failures found on them are not
    /// compared.
    pub unreadable: Vec<String>,
}

/// The replay report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub records_replayed: u64,
    pub undecodable_records: u64,
    pub decisions_compared: u64,
    pub identical: u64,
    pub diverged: u64,
    pub decisions: Comparison,
    /// With rounds: one comparison per round that emitted or should have
    /// emitted failures, plus each published failure's content; without
    /// (older logs): failures by what was found.
    pub failures: Comparison,
    /// Detector rounds replayed (0: the log has none, replayed by event time).
    pub detector_rounds: u64,
    /// Detector instances whose rounds name a record no longer held.
    pub detector_instances_incomplete: u64,
    pub policy_version_recorded: Vec<String>,
    pub policy_version_now: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
}

/// What another policy or configuration would have changed.
#[derive(Debug, Serialize)]
pub struct WhatIf {
    pub policy: String,
    pub commands: CommandDiff,
    pub failures_added: u64,
    pub failures_removed: u64,
    /// Accumulated WAF the planner's model gives each decision stream,
    /// weighted FLOP-seconds.
    pub waf_recorded: f64,
    pub waf_what_if: f64,
    pub waf_change_fraction: f64,
}

/// A policy by its name in the configuration and the records.
pub fn parse_policy(text: &str) -> Result<PolicyName, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string())).map_err(|_| {
        format!("`{text}`: policy must be unicron, checkpoint-restart or elastic-single-job")
    })
}

fn in_window(options: &Options, cluster: &str, time_ms: i64) -> bool {
    options.cluster.as_deref().is_none_or(|c| c == cluster)
        && options.since.is_none_or(|s| time_ms >= s)
        && options.until.is_none_or(|u| time_ms < u)
}

/// The recorded steps of `history` (see `unicron_core::replay::steps`).
pub fn steps(history: &History, cluster: Option<&str>) -> Vec<RecordedStep> {
    replay::steps(
        history.decisions.iter().map(|d| &d.record),
        &history.planner_inputs(),
        history.commands.iter().map(|c| &c.record),
        cluster,
    )
}

/// Replays `history` with `setup` and compares; with `what_if` (another
/// configuration) or `options.policy`, also replays with the alternative.
/// `on_phase` hears each phase as it starts (for progress displays).
pub fn replay(
    setup: Setup,
    options: &Options,
    history: &History,
    what_if: Option<Setup>,
    on_phase: &dyn Fn(&str),
) -> Report {
    let steps = steps(history, options.cluster.as_deref());
    let recorded_versions: BTreeSet<String> = steps
        .iter()
        .map(|s| s.decision.policy_version.clone())
        .collect();
    // Replay uses the policy the decisions were taken with.
    let recorded_policy = steps
        .first()
        .and_then(|s| parse_policy(&s.decision.policy).ok())
        .unwrap_or(setup.planner.policy);
    let auditor = || CommandSigner::from_seed("replay", [0; 32]);

    on_phase(&format!("replaying {} decisions", steps.len()));
    let tuning = PlannerConfig {
        policy: recorded_policy,
        ..setup.planner.clone()
    };
    let mut planner = Planner::new(tuning, auditor());
    let (decisions, _) = replay_planner(&mut planner, &steps, |s| {
        in_window(options, &s.decision.cluster, s.decision.time_ms)
    });

    on_phase("re-deriving failures");
    let observations = history.observations(options.cluster.as_deref());
    let recorded_failures: Vec<_> = history
        .failures
        .iter()
        .map(|r| r.record.clone())
        .filter(|f| options.cluster.as_deref().is_none_or(|c| c == f.cluster))
        .filter(|f| {
            f.evidence
                .first()
                .is_none_or(|e| !options.unreadable.contains(&e.topic))
        })
        .collect();
    let Setup {
        planner: planner_config,
        detector: detector_config,
        rules,
    } = setup;
    let mut detector = Detector::new(detector_config.clone(), rules.clone());
    let replayed_failures = detect_in_order(&mut detector, observations.clone());
    // With rounds, the detector is replayed exactly as it ran; without
    // (a log older than rounds), by event time, compared by what was found.
    let mut incomplete = 0;
    let failures = if history.rounds.is_empty() {
        compare_failures(&recorded_failures, &replayed_failures, |f| {
            in_window(options, &f.cluster, f.first_evidence_ms)
        })
    } else {
        on_phase("replaying detector rounds");
        let rounds: Vec<_> = history.rounds.iter().map(|r| r.record.clone()).collect();
        let all_observations = if options.cluster.is_some() {
            history.observations(None)
        } else {
            observations.clone()
        };
        let replayed = replay_rounds(
            &rounds,
            &by_record(&all_observations),
            &recorded_failures,
            || Detector::new(detector_config.clone(), rules.clone()),
            |f| in_window(options, &f.cluster, f.first_evidence_ms),
        );
        incomplete = replayed.incomplete_instances;
        replayed.comparison
    };
    let what_if = if options.policy.is_some() || what_if.is_some() {
        on_phase("what-if");
        let alt = what_if.as_ref().map_or(&planner_config, |w| &w.planner);
        let policy = options.policy.unwrap_or(alt.policy);
        let mut other = Planner::new(
            PlannerConfig {
                policy,
                ..alt.clone()
            },
            auditor(),
        );
        let (_, alternative) = replay_planner(&mut other, &steps, |_| false);
        let end = steps.iter().map(|s| s.decision.time_ms).max().unwrap_or(0);
        let waf_recorded = replay::accumulated_waf(steps.iter().map(|s| &s.decision), end);
        let waf_what_if =
            replay::accumulated_waf(alternative.iter().filter_map(|r| r.decision.as_ref()), end);
        let (added, removed) = match what_if {
            Some(alt) => {
                let mut d = Detector::new(alt.detector, alt.rules);
                let found = detect_in_order(&mut d, observations);
                let c = compare_failures(&replayed_failures, &found, |_| true);
                let extra = failures_only_in(&found, &replayed_failures);
                (extra, c.diverged - extra)
            }
            None => (0, 0),
        };
        Some(WhatIf {
            policy: policy.as_str().to_string(),
            commands: replay::diff_commands(&steps, &alternative),
            failures_added: added,
            failures_removed: removed,
            waf_recorded,
            waf_what_if,
            waf_change_fraction: if waf_recorded > 0.0 {
                waf_what_if / waf_recorded - 1.0
            } else {
                0.0
            },
        })
    } else {
        None
    };
    Report {
        records_replayed: history.len(),
        undecodable_records: history.undecodable,
        decisions_compared: decisions.compared,
        identical: decisions.identical + failures.identical,
        diverged: decisions.diverged + failures.diverged,
        decisions,
        failures,
        detector_rounds: history.rounds.len() as u64,
        detector_instances_incomplete: incomplete,
        policy_version_recorded: recorded_versions.into_iter().collect(),
        policy_version_now: POLICY_VERSION.to_string(),
        what_if,
    }
}

fn failures_only_in(list: &[FailureEvent], other: &[FailureEvent]) -> u64 {
    let keys: BTreeSet<_> = other.iter().map(replay::FailureKey::of).collect();
    list.iter()
        .map(replay::FailureKey::of)
        .collect::<BTreeSet<_>>()
        .iter()
        .filter(|k| !keys.contains(k))
        .count() as u64
}
