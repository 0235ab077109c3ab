//! What one observation yields: the clock it moves, the candidates for
//! failure it raises (log rules, metric rules, process supervision,
//! statistical monitoring) and the parts of it that are unusable.

use super::config::DetectorConfig;
use super::correlate::Candidate;
use super::progress::{IterationDone, ProgressSignal};
use super::templates::Sighting;
use super::{ClusterView, DetectorInput, LogRules, Observation, SourceRecord, evidence};
use crate::records::{
    AgentEvent, AgentEventKind, DetectionMethod, LogRecord, MetricSample, TelemetryBatch,
    WorkerChange,
};
use crate::taxonomy::{FailureKind, Severity};

/// What one observation yields.
#[derive(Debug, Default)]
pub(super) struct Ingested {
    /// Why parts of it are unusable.
    pub rejected: Vec<String>,
    pub candidates: Vec<Candidate>,
    /// The newest event time accepted from it.
    pub accepted_ms: Option<i64>,
}

impl Ingested {
    fn rejected(reason: String) -> Ingested {
        Ingested {
            rejected: vec![reason],
            ..Ingested::default()
        }
    }
}

/// Applies `input`'s observation to `view`.
pub(super) fn observe(
    config: &DetectorConfig,
    rules: &LogRules,
    view: &mut ClusterView,
    input: &DetectorInput,
) -> Ingested {
    let source = &input.source;
    match &input.observation {
        Observation::Log(record) => log(config, rules, view, record, source),
        Observation::Telemetry(batch) => telemetry(config, rules, view, batch, source),
        Observation::Agent(event) if event.idle_tick => idle_tick(config, view, event),
        Observation::Agent(event) => agent(config, view, event, source),
    }
}

fn log(
    config: &DetectorConfig,
    rules: &LogRules,
    view: &mut ClusterView,
    record: &LogRecord,
    source: &SourceRecord,
) -> Ingested {
    if let Err(reason) = view.clock.check(record.time_ms, config) {
        return Ingested::rejected(reason);
    }
    view.clock.advance(&record.node, record.time_ms, config);
    Ingested {
        rejected: Vec::new(),
        candidates: classify_log(rules, config, view, record, source)
            .into_iter()
            .collect(),
        accepted_ms: Some(record.time_ms),
    }
}

fn telemetry(
    config: &DetectorConfig,
    rules: &LogRules,
    view: &mut ClusterView,
    batch: &TelemetryBatch,
    source: &SourceRecord,
) -> Ingested {
    let mut out = Ingested::default();
    for sample in &batch.samples {
        if let Err(reason) = view.clock.check(sample.time_ms, config) {
            out.rejected
                .push(format!("sample `{}`: {reason}", sample.name));
            continue;
        }
        match view.metrics.observe(config, rules, &batch.node, sample) {
            Ok(found) => {
                view.clock.advance(&batch.node, sample.time_ms, config);
                out.accepted_ms = out.accepted_ms.max(Some(sample.time_ms));
                for (kind, rule) in found {
                    let job = sample
                        .job
                        .clone()
                        .or_else(|| view.nodes.get(&batch.node).and_then(|n| n.job.clone()));
                    out.candidates.push(Candidate {
                        kind,
                        severity: kind.default_severity(),
                        method: DetectionMethod::MetricRule,
                        rule: Some(rule),
                        node: Some(batch.node.clone()),
                        gpu: sample.gpu,
                        job,
                        rank: sample.rank,
                        time_ms: sample.time_ms,
                        evidence: vec![evidence(
                            source,
                            &batch.node,
                            &format!("{}{} = {}", sample.name, label_text(sample), sample.value),
                            config.excerpt_bytes,
                        )],
                        slowdown: None,
                    });
                }
            }
            Err(reason) => out
                .rejected
                .push(format!("sample `{}`: {reason}", sample.name)),
        }
    }
    out
}

/// Not a node's report: only the clock moves.
fn idle_tick(config: &DetectorConfig, view: &mut ClusterView, event: &AgentEvent) -> Ingested {
    if let Err(reason) = view.clock.check(event.time_ms, config) {
        return Ingested::rejected(reason);
    }
    view.clock.tick(event.time_ms);
    Ingested::default()
}

fn agent(
    config: &DetectorConfig,
    view: &mut ClusterView,
    event: &AgentEvent,
    source: &SourceRecord,
) -> Ingested {
    if let Err(reason) = view
        .clock
        .check(event.time_ms, config)
        .and_then(|()| validate_agent(event))
    {
        return Ingested::rejected(reason);
    }
    view.clock.advance(&event.node, event.time_ms, config);
    let candidates = if event.kind == AgentEventKind::Leaving {
        view.depart(&event.node, config);
        Vec::new()
    } else {
        on_agent(config, view, event, source)
    };
    Ingested {
        rejected: Vec::new(),
        candidates,
        accepted_ms: Some(event.time_ms),
    }
}

fn validate_agent(event: &AgentEvent) -> Result<(), String> {
    if let Some(t) = event.iteration_time_ms
        && !(t.is_finite() && t >= 0.0)
    {
        return Err(format!(
            "iteration_time_ms: {t} is not a finite non-negative number"
        ));
    }
    Ok(())
}

fn classify_log(
    rules: &LogRules,
    config: &DetectorConfig,
    view: &mut ClusterView,
    record: &LogRecord,
    source: &SourceRecord,
) -> Option<Candidate> {
    let verdict = rules.verdict(&record.line);
    if let Some(learned) = verdict.unclassified() {
        view.unclassified.0.add(Sighting {
            line: &record.line,
            node: &record.node,
            job: record.job.as_deref(),
            time_ms: record.time_ms,
            learned,
        });
    }
    let found = rules.classify_verdict(&record.line, verdict)?;
    let job = record
        .job
        .clone()
        .or_else(|| view.nodes.get(&record.node).and_then(|n| n.job.clone()));
    if let Some(job) = &job {
        view.job_nodes
            .entry(job.clone())
            .or_default()
            .insert(record.node.clone());
    }
    Some(Candidate {
        kind: found.kind,
        severity: found.severity,
        method: match found.score_permille {
            Some(_) => DetectionMethod::Learned,
            None => DetectionMethod::LogRule,
        },
        // A learned verdict carries its score, as `learned 0.912`.
        rule: Some(match found.score_permille {
            Some(score) => format!("{} {:.3}", found.rule, f64::from(score) / 1000.0),
            None => found.rule,
        }),
        node: Some(found.node.unwrap_or_else(|| record.node.clone())),
        gpu: record.gpu.or(found.gpu),
        job,
        rank: record.rank.or(found.rank),
        time_ms: record.time_ms,
        evidence: vec![evidence(
            source,
            &record.node,
            &record.line,
            config.excerpt_bytes,
        )],
        slowdown: None,
    })
}

fn on_agent(
    config: &DetectorConfig,
    view: &mut ClusterView,
    event: &AgentEvent,
    source: &SourceRecord,
) -> Vec<Candidate> {
    // Looked up before anything is cloned: a known node's heartbeat
    // (most of the detector's input) allocates no key.
    if !view.nodes.contains_key(&event.node) {
        view.nodes
            .insert(event.node.clone(), super::NodeView::default());
    }
    let node = view.nodes.get_mut(&event.node).expect("inserted above");
    if let Some(job) = &event.job {
        if node.job.as_ref() != Some(job) {
            node.job = Some(job.clone());
        }
        match view.job_nodes.get_mut(job) {
            Some(nodes) if nodes.contains(&event.node) => {}
            Some(nodes) => {
                nodes.insert(event.node.clone());
            }
            None => {
                view.job_nodes
                    .insert(job.clone(), [event.node.clone()].into_iter().collect());
            }
        }
    }
    match event.kind {
        AgentEventKind::Heartbeat => {
            let now = view.clock.now();
            view.deadlines.heartbeat(node, event, now, source, config);
            Vec::new()
        }
        AgentEventKind::ProcessExit => {
            let code = event.exit_code.unwrap_or(0);
            // The agent stopped it on a command: the command's cause was
            // the failure, the stop is not another.
            let stopped_by_agent = event
                .worker
                .as_ref()
                .is_some_and(|w| w.change == WorkerChange::Stopped);
            let clean_signal = stopped_by_agent
                || event
                    .signal
                    .is_some_and(|s| config.clean_signals.contains(&s))
                || config.clean_signals.iter().any(|s| code == 128 + s);
            if (code == 0 && event.signal.is_none()) || clean_signal {
                if let Some(job) = &event.job {
                    view.jobs.remove(job); // finished or stopped on purpose
                }
                return Vec::new();
            }
            let what = match (event.exit_code, event.signal) {
                (_, Some(signal)) => format!("process exited on signal {signal}"),
                (Some(code), None) => format!("process exited with code {code}"),
                (None, None) => "process exited".to_string(),
            };
            vec![Candidate {
                kind: FailureKind::ExitedAbnormally,
                severity: Severity::Sev2,
                method: DetectionMethod::ProcessSupervision,
                rule: Some(
                    if event.signal.is_some() {
                        super::correlate::SIGNAL_RULE
                    } else {
                        "process.exit"
                    }
                    .into(),
                ),
                node: Some(event.node.clone()),
                gpu: None,
                job: event.job.clone(),
                rank: event.rank,
                time_ms: event.time_ms,
                evidence: vec![evidence(source, &event.node, &what, config.excerpt_bytes)],
                slowdown: None,
            }]
        }
        AgentEventKind::IterationDone => {
            let Some(job) = &event.job else {
                return Vec::new();
            };
            let progress = view.jobs.entry(job.clone()).or_default();
            let signals = progress.iteration(
                &IterationDone {
                    rank: event.rank,
                    node: &event.node,
                    iteration: event.iteration,
                    time_ms: event.iteration_time_ms,
                    compute_ms: event.compute_ms,
                    event_ms: event.time_ms,
                },
                config,
            );
            signals
                .into_iter()
                .map(|signal| {
                    let (kind, node, rank, rule, text, slowdown) = match signal {
                        ProgressSignal::SlowIteration { time_ms, mean_ms } => (
                            FailureKind::TaskHang,
                            None,
                            None,
                            "progress.slow_iteration",
                            format!("iteration took {time_ms:.0} ms, mean {mean_ms:.0} ms"),
                            None,
                        ),
                        ProgressSignal::Straggler {
                            rank,
                            node,
                            rank_ms,
                            median_ms,
                            slowdown,
                            compute,
                        } => (
                            FailureKind::Straggler,
                            Some(node),
                            Some(rank),
                            "progress.straggler",
                            format!(
                                "rank {rank} {} {rank_ms:.0} ms against its peers' median {median_ms:.0} ms",
                                if compute { "computes in" } else { "steps in" }
                            ),
                            Some(slowdown),
                        ),
                    };
                    Candidate {
                        kind,
                        severity: kind.default_severity(),
                        method: DetectionMethod::Statistical,
                        rule: Some(rule.into()),
                        rank,
                        node,
                        gpu: None,
                        job: Some(job.clone()),
                        time_ms: event.time_ms,
                        slowdown,
                        evidence: vec![evidence(source, &event.node, &text, config.excerpt_bytes)],
                    }
                })
                .collect()
        }
        // Handled before: the node's timers stop.
        AgentEventKind::Leaving => Vec::new(),
        AgentEventKind::Unknown => match &event.worker {
            // A stopped process (SIGSTOP, a debugger) makes no progress and
            // its peers wait in the collective: a hang, visible at once.
            Some(worker)
                if worker.change == WorkerChange::State
                    && worker.process_state.as_deref() == Some("stopped") =>
            {
                vec![Candidate {
                    kind: FailureKind::TaskHang,
                    severity: FailureKind::TaskHang.default_severity(),
                    method: DetectionMethod::ProcessSupervision,
                    rule: Some("process.stopped".into()),
                    node: Some(event.node.clone()),
                    gpu: None,
                    job: event.job.clone(),
                    rank: event.rank,
                    time_ms: event.time_ms,
                    evidence: vec![evidence(
                        source,
                        &event.node,
                        &format!("worker pid {} is stopped (procfs state T)", worker.pid),
                        config.excerpt_bytes,
                    )],
                    slowdown: None,
                }]
            }
            _ => Vec::new(),
        },
    }
}

fn label_text(sample: &MetricSample) -> String {
    if sample.labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = sample
        .labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    format!("{{{}}}", inner.join(","))
}
