//! Ground truth: what was injected, when the detector reported it, which
//! action fixed it, and the work done against the no-failure ideal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use unicron_core::{CommandAction, FailureEvent, FailureKind, Severity};

/// One injected failure and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    pub index: usize,
    pub kind: FailureKind,
    pub node: String,
    pub job: Option<String>,
    pub gpu: u32,
    pub injected_ms: i64,
    /// What fixes it: the kind's severity, or SEV1 (taking the node out)
    /// for a real trace's fault, whose node stays broken until repaired.
    pub needs: Severity,
    /// A real trace's end of repair: an isolated node is back then.
    pub repaired_at_ms: Option<i64>,
    /// The trace's own name for it (a real trace's category).
    pub category: Option<String>,
    pub detected_ms: Option<i64>,
    /// The kind the detector called it.
    pub detected_as: Option<FailureKind>,
    pub resolved_ms: Option<i64>,
    pub resolved_by: Option<CommandAction>,
    /// When the hit job next ran again after the fault was resolved: the
    /// failure's downtime ends there.
    pub running_again_ms: Option<i64>,
}

impl Fault {
    pub fn new(
        index: usize,
        kind: FailureKind,
        node: &str,
        job: Option<String>,
        gpu: u32,
        injected_ms: i64,
    ) -> Fault {
        Fault {
            index,
            kind,
            node: node.to_string(),
            job,
            gpu,
            injected_ms,
            needs: crate::faults::needs(kind),
            repaired_at_ms: None,
            category: None,
            detected_ms: None,
            detected_as: None,
            resolved_ms: None,
            resolved_by: None,
            running_again_ms: None,
        }
    }
}

/// Everything the simulator knows that the control plane should find out.
#[derive(Debug, Clone, PartialEq)]
pub struct Truth {
    pub faults: Vec<Fault>,
    /// Injections that found no eligible node (trace node busy or absent).
    pub skipped: u64,
    /// Every trace entry the run reached, hit or skipped, in order.
    pub offered: Vec<crate::faults::TraceEntry>,
    pub actions: BTreeMap<CommandAction, u64>,
    pub failed_actions: u64,
    /// Commands whose effect time had passed when they arrived: the control
    /// plane was slower than `dispatch_s` at this speed, and the run may not
    /// reproduce exactly.
    pub late_actions: u64,
    pub duplicate_requests: u64,
    /// Reports that match no injected failure.
    pub false_detections: u64,
    /// Further reports of a failure already detected.
    pub repeat_detections: u64,
    /// Weighted FLOPs of progress kept (rolled-back work is not).
    pub work: f64,
    ideal_rate: f64,
    start_ms: i64,
    now_ms: i64,
    /// (time, weighted FLOP/s) once a simulated minute, for plots.
    pub timeline: Vec<(i64, f64)>,
}

const TIMELINE_EVERY_MS: i64 = 60_000;
const TIMELINE_MAX: usize = 100_000;

impl Truth {
    pub fn new(ideal_rate: f64, start_ms: i64) -> Truth {
        Truth {
            faults: Vec::new(),
            skipped: 0,
            offered: Vec::new(),
            actions: BTreeMap::new(),
            failed_actions: 0,
            late_actions: 0,
            duplicate_requests: 0,
            false_detections: 0,
            repeat_detections: 0,
            work: 0.0,
            ideal_rate,
            start_ms,
            now_ms: start_ms,
            timeline: Vec::new(),
        }
    }

    pub fn account(&mut self, now_ms: i64, rate: f64) {
        self.now_ms = now_ms;
        if (now_ms - self.start_ms) % TIMELINE_EVERY_MS == 0 && self.timeline.len() < TIMELINE_MAX {
            self.timeline.push((now_ms, rate));
        }
    }

    /// Every tick after `from_ms` up to `until_ms` at one `rate`: what
    /// [`Truth::account`] would record tick by tick.
    pub fn account_span(&mut self, from_ms: i64, until_ms: i64, rate: f64) {
        let since = from_ms - self.start_ms;
        let mut t = self.start_ms + (since.div_euclid(TIMELINE_EVERY_MS) + 1) * TIMELINE_EVERY_MS;
        while t <= until_ms && self.timeline.len() < TIMELINE_MAX {
            self.timeline.push((t, rate));
            t += TIMELINE_EVERY_MS;
        }
        self.now_ms = until_ms;
    }

    pub fn count_action(&mut self, action: CommandAction) {
        *self.actions.entry(action).or_default() += 1;
    }

    pub fn resolve(&mut self, index: usize, at_ms: i64, by: CommandAction) {
        let fault = &mut self.faults[index];
        if fault.resolved_ms.is_none() {
            fault.resolved_ms = Some(at_ms);
            fault.resolved_by = Some(by);
        }
    }

    /// Matches a report to the earliest undetected failure on its node or
    /// job injected before it was detected.
    pub fn observe(&mut self, failure: &FailureEvent) {
        let touches = |f: &Fault| {
            failure.node.as_deref() == Some(f.node.as_str())
                || (failure.job.is_some() && failure.job == f.job)
        };
        let open = self.faults.iter().position(|f| {
            f.detected_ms.is_none() && f.injected_ms <= failure.detected_ms && touches(f)
        });
        match open {
            Some(index) => {
                let fault = &mut self.faults[index];
                fault.detected_ms = Some(failure.detected_ms);
                fault.detected_as = Some(failure.kind);
            }
            None if self.faults.iter().any(touches) => self.repeat_detections += 1,
            None => self.false_detections += 1,
        }
    }

    /// Accumulated WAF as a fraction of the no-failure ideal.
    pub fn waf_fraction(&self) -> f64 {
        let elapsed_s = (self.now_ms - self.start_ms) as f64 / 1000.0;
        let ideal = self.ideal_rate * elapsed_s;
        if ideal > 0.0 { self.work / ideal } else { 0.0 }
    }

    pub fn ideal_rate(&self) -> f64 {
        self.ideal_rate
    }

    pub fn elapsed_s(&self) -> f64 {
        (self.now_ms - self.start_ms) as f64 / 1000.0
    }
}

/// The end-of-run report (`unicron up --summary-json`). Times are
/// simulated seconds; values are rounded so equal runs print equal files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub cluster: String,
    pub seed: u64,
    pub sim_seconds: f64,
    pub nodes: u32,
    pub gpus: u32,
    pub jobs: u32,
    /// Random failures as a multiple of the paper setting's rate (one per
    /// 256 GPU-hours, assumed); 0 with a trace or none.
    #[serde(default)]
    pub failure_rate_vs_paper: f64,
    #[serde(default)]
    pub arrivals: crate::config::Arrivals,
    pub failures_injected: u64,
    pub failures_detected: u64,
    pub failures_resolved: u64,
    pub failures_skipped: u64,
    pub injected_by_kind: BTreeMap<String, u64>,
    pub detected_by_kind: BTreeMap<String, u64>,
    pub mean_detection_delay_s: f64,
    pub max_detection_delay_s: f64,
    /// Per injected kind: the median and largest delay from injection to
    /// the failure event, simulated seconds (detected faults only).
    #[serde(default)]
    pub detection_delay_by_kind: BTreeMap<String, DelayStats>,
    pub mean_time_to_action_s: f64,
    pub commands_executed: u64,
    pub actions_by_kind: BTreeMap<String, u64>,
    pub failed_actions: u64,
    pub late_actions: u64,
    pub duplicate_requests: u64,
    pub false_detections: u64,
    pub repeat_detections: u64,
    pub downtime_s: BTreeMap<String, f64>,
    pub waf_fraction: f64,
    pub faults: Vec<Fault>,
}

/// Detection delays of one failure kind, simulated seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DelayStats {
    pub p50_s: f64,
    pub max_s: f64,
}

impl DelayStats {
    /// `None` for no delays. The p50 is the lower median (a value that
    /// occurred, as with one or two samples the mean would not be).
    fn of(delays: &mut [f64]) -> Option<DelayStats> {
        delays.sort_by(f64::total_cmp);
        let max_s = *delays.last()?;
        Some(DelayStats {
            p50_s: round(delays[(delays.len() - 1) / 2], 3),
            max_s: round(max_s, 3),
        })
    }
}

fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

impl Summary {
    pub fn new(
        truth: &Truth,
        config: &crate::config::SimConfig,
        downtime_s: BTreeMap<String, f64>,
    ) -> Summary {
        let mut injected_by_kind = BTreeMap::new();
        let mut detected_by_kind = BTreeMap::new();
        let mut delays = Vec::new();
        let mut delays_by_kind: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut to_action = Vec::new();
        for fault in &truth.faults {
            *injected_by_kind.entry(fault.kind.to_string()).or_default() += 1;
            if let Some(at) = fault.detected_ms {
                *detected_by_kind.entry(fault.kind.to_string()).or_default() += 1;
                let delay = (at - fault.injected_ms) as f64 / 1000.0;
                delays.push(delay);
                delays_by_kind
                    .entry(fault.kind.to_string())
                    .or_default()
                    .push(delay);
            }
            if let Some(at) = fault.resolved_ms {
                to_action.push((at - fault.injected_ms) as f64 / 1000.0);
            }
        }
        let mean = |v: &[f64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        Summary {
            cluster: config.cluster.clone(),
            seed: config.seed,
            sim_seconds: round(truth.elapsed_s(), 3),
            nodes: config.nodes,
            gpus: config.nodes * config.gpus_per_node,
            jobs: config.jobs,
            failure_rate_vs_paper: round(config.rate_vs_paper(), 3),
            arrivals: config.arrivals,
            failures_injected: truth.faults.len() as u64,
            failures_detected: delays.len() as u64,
            failures_resolved: to_action.len() as u64,
            failures_skipped: truth.skipped,
            injected_by_kind,
            detected_by_kind,
            mean_detection_delay_s: round(mean(&delays), 3),
            max_detection_delay_s: round(delays.iter().cloned().fold(0.0, f64::max), 3),
            detection_delay_by_kind: delays_by_kind
                .into_iter()
                .filter_map(|(kind, mut d)| Some((kind, DelayStats::of(&mut d)?)))
                .collect(),
            mean_time_to_action_s: round(mean(&to_action), 3),
            commands_executed: truth.actions.values().sum(),
            actions_by_kind: truth
                .actions
                .iter()
                .map(|(a, n)| (a.symbol().to_string(), *n))
                .collect(),
            failed_actions: truth.failed_actions,
            late_actions: truth.late_actions,
            duplicate_requests: truth.duplicate_requests,
            false_detections: truth.false_detections,
            repeat_detections: truth.repeat_detections,
            downtime_s: downtime_s
                .into_iter()
                .map(|(k, v)| (k, round(v, 3)))
                .collect(),
            waf_fraction: round(truth.waf_fraction(), 6),
            faults: truth.faults.clone(),
        }
    }

    /// The table `unicron up` prints at the end.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "summary: {} s simulated, {} nodes / {} GPUs, {} jobs, seed {}",
            self.sim_seconds, self.nodes, self.gpus, self.jobs, self.seed
        );
        let _ = writeln!(out, "  failures: {}", self.rate_label());
        let _ = writeln!(
            out,
            "  {:<24} {:>8} {:>8} {:>14}",
            "failure kind", "injected", "detected", "delay p50/max"
        );
        for (kind, n) in &self.injected_by_kind {
            let d = self.detected_by_kind.get(kind).copied().unwrap_or(0);
            let delay = self.detection_delay_by_kind.get(kind).map_or_else(
                || "-".to_string(),
                |s| format!("{:.1}/{:.1} s", s.p50_s, s.max_s),
            );
            let _ = writeln!(out, "  {kind:<24} {n:>8} {d:>8} {delay:>14}");
        }
        let _ = writeln!(
            out,
            "  {:<24} {:>8} {:>8}",
            "total", self.failures_injected, self.failures_detected
        );
        let _ = writeln!(
            out,
            "  detection delay: mean {:.1} s, max {:.1} s; failure to action: mean {:.1} s",
            self.mean_detection_delay_s, self.max_detection_delay_s, self.mean_time_to_action_s
        );
        let actions: Vec<String> = self
            .actions_by_kind
            .iter()
            .map(|(a, n)| format!("{a} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  actions: {} executed ({}), {} failed, {} late",
            self.commands_executed,
            if actions.is_empty() {
                "none".to_string()
            } else {
                actions.join(", ")
            },
            self.failed_actions,
            self.late_actions
        );
        let _ = writeln!(
            out,
            "  false detections: {}, repeats: {}",
            self.false_detections, self.repeat_detections
        );
        let caveat = if self.failure_rate_vs_paper > 0.0
            && (self.failure_rate_vs_paper - 1.0).abs() > 1e-9
        {
            " (at this failure rate; not comparable with the paper's figures)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  WAF achieved: {:.1}% of the no-failure ideal{caveat}",
            self.waf_fraction * 100.0
        );
        out
    }

    /// How failures were injected, for the summary and the progress line.
    pub fn rate_label(&self) -> String {
        rate_label(self.failure_rate_vs_paper, self.arrivals)
    }
}

/// "30x the paper setting's rate (demo)" and the like; `rate` as
/// [`crate::SimConfig::rate_vs_paper`] gives it.
pub fn rate_label(rate: f64, arrivals: crate::config::Arrivals) -> String {
    if rate <= 0.0 {
        return "from a trace, or none".to_string();
    }
    let demo = match arrivals {
        crate::config::Arrivals::Demo => ", demo: one of each severity first",
        crate::config::Arrivals::Poisson => "",
    };
    if (rate - 1.0).abs() < 1e-9 {
        format!("random, at the paper setting's rate (one per 256 GPU-hours, assumed){demo}")
    } else {
        format!(
            "random, at {}x the paper setting's rate{demo}",
            rate_multiple(rate)
        )
    }
}

/// A rate multiple as people write it: `30`, `7.5`, `0.25`.
pub fn rate_multiple(rate: f64) -> String {
    let text = format!("{rate:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Arrivals, DEMO_MTBF_S, SimConfig};

    #[test]
    fn rates_read_as_people_write_them() {
        assert_eq!(rate_multiple(30.0), "30");
        assert_eq!(rate_multiple(7.5), "7.5");
        assert_eq!(rate_multiple(0.25), "0.25");
        assert_eq!(
            rate_label(30.0, Arrivals::Demo),
            "random, at 30x the paper setting's rate, demo: one of each severity first"
        );
        assert!(
            rate_label(1.0, Arrivals::Poisson).starts_with("random, at the paper setting's rate")
        );
        assert_eq!(rate_label(0.0, Arrivals::Poisson), "from a trace, or none");
    }

    #[test]
    fn the_rate_is_measured_against_the_paper_setting_for_the_cluster_size() {
        let paper = SimConfig::default();
        assert_eq!(paper.mean_interval_s(), 7_200.0);
        assert_eq!(paper.rate_vs_paper(), 1.0);
        let demo = SimConfig {
            mtbf_s: Some(DEMO_MTBF_S),
            ..SimConfig::default()
        };
        assert_eq!(demo.rate_vs_paper(), 30.0);
        let small = SimConfig {
            nodes: 4,
            ..demo.clone()
        };
        assert_eq!(small.rate_vs_paper(), 120.0);
        let none = SimConfig {
            mtbf_s: Some(0.0),
            ..SimConfig::default()
        };
        assert_eq!(none.rate_vs_paper(), 0.0);
    }
}
