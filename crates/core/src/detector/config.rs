//! Detector settings: deadlines, windows and metric thresholds, all in event time.

use serde::{Deserialize, Serialize};

use crate::taxonomy::FailureKind;

/// How the detector decides; every duration is event time, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DetectorConfig {
    /// A node whose newest heartbeat is older than this (against the
    /// watermark) is lost: `lost_connection`, SEV1.
    pub heartbeat_deadline_s: f64,
    /// The watermark trails the newest event time by this much, so records
    /// up to this late still count before a timer fires.
    pub allowed_lateness_s: f64,
    /// Records further than this ahead of the cluster's newest event time
    /// are rejected (a clock decades off must not move the watermark).
    pub max_future_skew_s: f64,
    /// A node's clock may run this far ahead of the cluster's other nodes
    /// without moving the cluster's clock (and so without making them look
    /// silent); see docs/detector.md. 0: the newest node's time is the
    /// cluster's clock.
    pub max_clock_skew_s: f64,
    /// Symptoms (NCCL timeouts, network errors, abnormal exits) are held this
    /// long so one root cause can absorb what every rank reports about it.
    pub correlation_window_s: f64,
    /// The one setting in processing time: a symptom group also stays open
    /// this many seconds of the service's clock after it was read, as the
    /// rounds record it ([`crate::DetectorRound::read_ms`]). Under a backlog
    /// the watermark crosses a correlation window in milliseconds, and the
    /// root cause on another partition (a log line read from `logs`, the
    /// exit it explains from `agent`) may only be fetched a moment later,
    /// after a partition looked read to its end on a stale high watermark.
    /// Without a backlog the event-time window is longer than this anyway.
    pub symptom_settle_s: f64,
    /// A symptom group whose job has a node silent for this long names that
    /// node as lost, before its heartbeat deadline.
    pub suspect_after_s: f64,
    /// Silence is judged against the nodes still heard: a heartbeat or hang
    /// deadline passes when another node reported past it. When every node
    /// of a cluster falls silent at once (far more often the network between
    /// the cluster and the broker than every node at once), only idle ticks
    /// move its clock, and the deadlines wait this much longer.
    pub all_silent_grace_s: f64,
    /// After such a spell ends, the nodes cut off with the first one heard
    /// again may still be flushing what they queued (a client reconnects
    /// within seconds, not at once): silence timers wait until nodes have
    /// been heard this long past the spell.
    pub resume_grace_s: f64,
    /// Repeats of an emitted failure (same kind, same node or job) within
    /// this window become evidence, not new events.
    pub dedupe_window_s: f64,
    /// The Nth SEV3 failure of one node within `escalation_window_s` is
    /// escalated to SEV2 (ByteRobust: 2 within 5 minutes; 0 disables).
    pub escalation_repeats: usize,
    pub escalation_window_s: f64,
    /// Iteration longer than `hang_factor` × the job's mean, or no progress
    /// for that long (either at least `hang_min_stall_s`): `task_hang`.
    pub hang_factor: f64,
    /// Iterations a job needs before hang detection trusts its mean.
    pub hang_min_iterations: u64,
    /// No progress is not called a hang before this long. Past the heartbeat
    /// deadline plus lateness by default: a node that died stalls its job
    /// too, and must be reported as the lost node, not as a hung job.
    pub hang_min_stall_s: f64,
    /// A rank whose mean iteration time is this many times the job's median
    /// rank over `straggler_window` iterations is a `straggler`.
    pub straggler_factor: f64,
    pub straggler_window: usize,
    /// Exit signals that mean a requested stop, not a failure (SIGTERM,
    /// SIGINT: what a restart command sends).
    pub clean_signals: Vec<i32>,
    /// Longest excerpt kept per evidence, bytes.
    pub excerpt_bytes: usize,
    /// Most evidence entries per failure event.
    pub max_evidence: usize,
    /// Counters that signal a failure when they increase by `min_increase`.
    pub counter_rules: Vec<CounterRule>,
    /// Gauges that signal a failure when they cross `above`.
    pub gauge_rules: Vec<GaugeRule>,
}

/// A counter metric whose increase is a failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterRule {
    pub metric: String,
    pub kind: FailureKind,
    pub min_increase: f64,
}

/// A gauge metric whose crossing of a threshold is a failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaugeRule {
    pub metric: String,
    pub kind: FailureKind,
    pub above: f64,
}

fn counter(metric: &str, kind: FailureKind, min_increase: f64) -> CounterRule {
    CounterRule {
        metric: metric.into(),
        kind,
        min_increase,
    }
}

impl Default for DetectorConfig {
    fn default() -> Self {
        use FailureKind::*;
        DetectorConfig {
            heartbeat_deadline_s: 3.0,
            allowed_lateness_s: 1.0,
            max_future_skew_s: 3600.0,
            max_clock_skew_s: 30.0,
            correlation_window_s: 2.0,
            symptom_settle_s: 2.0,
            suspect_after_s: 2.0,
            all_silent_grace_s: 60.0,
            resume_grace_s: 15.0,
            dedupe_window_s: 60.0,
            escalation_repeats: 2,
            escalation_window_s: 300.0,
            hang_factor: 3.0,
            hang_min_iterations: 5,
            hang_min_stall_s: 6.0,
            straggler_factor: 1.15,
            straggler_window: 20,
            clean_signals: vec![2, 15],
            excerpt_bytes: 256,
            max_evidence: 32,
            // DCGM exporter field names (dcgm-exporter's default counters).
            counter_rules: vec![
                counter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", EccError, 1.0),
                counter("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", EccError, 1.0),
                counter(
                    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
                    NvlinkError,
                    1.0,
                ),
                counter(
                    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                    NvlinkError,
                    100.0,
                ),
                counter(
                    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                    NvlinkError,
                    100.0,
                ),
                counter(
                    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                    NvlinkError,
                    100.0,
                ),
            ],
            gauge_rules: vec![
                GaugeRule {
                    metric: "DCGM_FI_DEV_ROW_REMAP_FAILURE".into(),
                    kind: EccError,
                    above: 0.0,
                },
                // Thermal limit: a throttled GPU makes its rank slow. The
                // taxonomy has no thermal kind; `straggler` (SEV3) is what the
                // job experiences.
                GaugeRule {
                    metric: "DCGM_FI_DEV_GPU_TEMP".into(),
                    kind: Straggler,
                    above: 90.0,
                },
            ],
        }
    }
}

impl DetectorConfig {
    /// The first field that makes no sense, as `field: reason`.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("heartbeat_deadline_s", self.heartbeat_deadline_s),
            ("max_future_skew_s", self.max_future_skew_s),
            ("hang_factor", self.hang_factor),
            ("straggler_factor", self.straggler_factor),
        ];
        for (field, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(format!("{field}: must be a positive number, got {value}"));
            }
        }
        let non_negative = [
            ("allowed_lateness_s", self.allowed_lateness_s),
            ("max_clock_skew_s", self.max_clock_skew_s),
            ("correlation_window_s", self.correlation_window_s),
            ("symptom_settle_s", self.symptom_settle_s),
            ("suspect_after_s", self.suspect_after_s),
            ("all_silent_grace_s", self.all_silent_grace_s),
            ("resume_grace_s", self.resume_grace_s),
            ("dedupe_window_s", self.dedupe_window_s),
            ("escalation_window_s", self.escalation_window_s),
            ("hang_min_stall_s", self.hang_min_stall_s),
        ];
        for (field, value) in non_negative {
            if !(value.is_finite() && value >= 0.0) {
                return Err(format!("{field}: must be zero or more, got {value}"));
            }
        }
        if self.straggler_window == 0 {
            return Err("straggler_window: must be at least 1".into());
        }
        if self.max_evidence == 0 {
            return Err("max_evidence: must be at least 1".into());
        }
        Ok(())
    }
}

pub(crate) fn ms(seconds: f64) -> i64 {
    (seconds * 1000.0).round() as i64
}
