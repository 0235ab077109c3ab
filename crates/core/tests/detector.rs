//! The detector's methods and correlation, driven by event time only.

use std::collections::BTreeMap;

use unicron_core::detector::{
    Detector, DetectorConfig, DetectorInput, DetectorOutput, LogRules, Observation, SourceRecord,
};
use unicron_core::{
    AgentEvent, AgentEventKind, DetectionMethod, FailureEvent, FailureKind, LogRecord,
    MetricSample, Severity, TelemetryBatch,
};

const T0: i64 = 1_780_000_000_000;

/// The scenarios here were written on a timeline of 30-s heartbeat
/// deadlines (the defaults before heartbeats came every second); what they
/// test, ordering and correlation, does not depend on the values. Time
/// passes in them by one node's records, so the cluster's clock is the
/// newest node's (no skew tolerance).
fn slow_timers() -> DetectorConfig {
    DetectorConfig {
        max_clock_skew_s: 0.0,
        heartbeat_deadline_s: 30.0,
        allowed_lateness_s: 2.0,
        correlation_window_s: 5.0,
        suspect_after_s: 10.0,
        hang_min_stall_s: 40.0,
        ..DetectorConfig::default()
    }
}

struct Harness {
    detector: Detector,
    offset: i64,
    failures: Vec<FailureEvent>,
    rejected: Vec<String>,
}

impl Harness {
    fn new() -> Harness {
        Harness::with(slow_timers())
    }

    fn with(config: DetectorConfig) -> Harness {
        Harness {
            detector: Detector::new(config, LogRules::builtin()),
            offset: 0,
            failures: Vec::new(),
            rejected: Vec::new(),
        }
    }

    fn feed(&mut self, topic: &str, observation: Observation) {
        self.offset += 1;
        let input = DetectorInput {
            source: SourceRecord {
                topic: topic.into(),
                partition: 0,
                offset: self.offset,
                index: 0,
            },
            observation,
            caught_up: true,
        };
        for output in self.detector.apply(&input) {
            match output {
                DetectorOutput::Failure(f) => self.failures.push(f),
                DetectorOutput::Rejected(reason) => self.rejected.push(reason),
            }
        }
    }

    fn heartbeat(&mut self, node: &str, job: Option<&str>, t: i64) {
        self.feed(
            "unicron.agent",
            Observation::Agent(agent(node, job, t, AgentEventKind::Heartbeat)),
        );
    }

    fn log(&mut self, node: &str, job: Option<&str>, rank: Option<i32>, t: i64, line: &str) {
        self.feed(
            "unicron.logs",
            Observation::Log(LogRecord {
                cluster: "c1".into(),
                node: node.into(),
                time_ms: t,
                source: "test".into(),
                job: job.map(str::to_string),
                rank,
                gpu: None,
                line: line.into(),
                attributes: BTreeMap::new(),
            }),
        );
    }

    fn iteration(
        &mut self,
        node: &str,
        job: &str,
        rank: i32,
        iteration: i64,
        t: i64,
        took_ms: f64,
    ) {
        let mut e = agent(node, Some(job), t, AgentEventKind::IterationDone);
        e.rank = Some(rank);
        e.iteration = Some(iteration);
        e.iteration_time_ms = Some(took_ms);
        self.feed("unicron.agent", Observation::Agent(e));
    }

    /// A synchronous step: every rank took `step_ms`, of which `compute_ms`
    /// was its own compute.
    fn step(&mut self, rank: i32, iteration: i64, t: i64, step_ms: f64, compute_ms: f64) {
        let mut e = agent(
            &node(rank as usize),
            Some("j"),
            t,
            AgentEventKind::IterationDone,
        );
        e.rank = Some(rank);
        e.iteration = Some(iteration);
        e.iteration_time_ms = Some(step_ms);
        e.compute_ms = Some(compute_ms);
        self.feed("unicron.agent", Observation::Agent(e));
    }

    fn stragglers(&self) -> Vec<&FailureEvent> {
        self.failures
            .iter()
            .filter(|f| f.kind == FailureKind::Straggler)
            .collect()
    }

    fn sample(&mut self, node: &str, name: &str, value: f64, t: i64, labels: &[(&str, &str)]) {
        self.feed(
            "unicron.telemetry",
            Observation::Telemetry(TelemetryBatch {
                cluster: "c1".into(),
                node: node.into(),
                source: "test".into(),
                samples: vec![MetricSample {
                    name: name.into(),
                    value,
                    time_ms: t,
                    gpu: Some(0),
                    job: None,
                    rank: None,
                    labels: labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                }],
            }),
        );
    }
}

fn agent(node: &str, job: Option<&str>, t: i64, kind: AgentEventKind) -> AgentEvent {
    AgentEvent {
        cluster: "c1".into(),
        node: node.into(),
        time_ms: t,
        kind,
        job: job.map(str::to_string),
        rank: None,
        exit_code: None,
        signal: None,
        iteration: None,
        iteration_time_ms: None,
        compute_ms: None,
        idle_tick: false,
        worker: None,
    }
}

fn node(i: usize) -> String {
    format!("n{i}")
}

#[test]
fn heartbeat_loss_is_detected_in_event_time_despite_out_of_order_records() {
    let mut h = Harness::new();
    // n0 beats every second for 80 s; n1 stops after 20 s. Records of each
    // second arrive in reverse node order and one n1 beat arrives 1.5 s late.
    for s in 0..80 {
        let t = T0 + s * 1000;
        h.heartbeat("n0", None, t);
        if s < 20 && s != 10 {
            h.heartbeat("n1", None, t - 500);
        }
        if s == 12 {
            h.heartbeat("n1", None, T0 + 10_000 - 500); // late, inside the lateness
        }
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    let f = &h.failures[0];
    assert_eq!(f.kind, FailureKind::LostConnection);
    assert_eq!(f.severity, Severity::Sev1);
    assert_eq!(f.method, DetectionMethod::Heartbeat);
    assert_eq!(f.node.as_deref(), Some("n1"));
    assert_eq!(f.first_evidence_ms, T0 + 19_000 - 500);
    // Fires once the watermark (newest − 2 s lateness) passes 30 s after
    // the cluster's clock when n1's last beat arrived (n0 had reached 19 s).
    assert!(
        f.detected_ms > T0 + 19_000 + 30_000 + 2_000,
        "{}",
        f.detected_ms
    );
    assert!(
        f.detected_ms <= T0 + 19_000 + 30_000 + 3_000,
        "{}",
        f.detected_ms
    );
    assert_eq!(f.evidence.len(), 1);
}

#[test]
fn a_node_heard_from_again_is_watched_again() {
    let mut h = Harness::new();
    for s in 0..200 {
        let t = T0 + s * 1000;
        h.heartbeat("n0", None, t);
        if !(10..60).contains(&s) && s < 120 {
            h.heartbeat("n1", None, t);
        }
    }
    let lost: Vec<_> = h
        .failures
        .iter()
        .filter(|f| f.node.as_deref() == Some("n1"))
        .collect();
    assert_eq!(lost.len(), 2, "lost, back, lost again: {lost:#?}");
}

#[test]
fn one_dead_node_seen_by_64_ranks_is_one_failure_of_that_node() {
    let mut h = Harness::new();
    // 8 nodes × 8 ranks of job j; n3 dies at 20 s; the other ranks' NCCL
    // watchdogs fire at 25 s, before n3's 30 s heartbeat deadline.
    for s in 0..=24 {
        for i in 0..8 {
            if i != 3 || s < 20 {
                h.heartbeat(&node(i), Some("j"), T0 + s * 1000);
            }
        }
    }
    for i in (0..8).filter(|i| *i != 3) {
        for r in 0..8 {
            let rank = (i * 8 + r) as i32;
            h.log(
                &node(i),
                Some("j"),
                Some(rank),
                T0 + 25_000 + r as i64,
                &format!("[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."),
            );
        }
    }
    for s in 25..90 {
        for i in (0..8).filter(|i| *i != 3) {
            h.heartbeat(&node(i), Some("j"), T0 + s * 1000);
        }
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    let f = &h.failures[0];
    assert_eq!(f.kind, FailureKind::LostConnection);
    assert_eq!(f.node.as_deref(), Some("n3"));
    assert_eq!(f.job.as_deref(), Some("j"));
    assert_eq!(f.rule.as_deref(), Some("correlation.silent_peer"));
    assert_eq!(f.evidence.len(), 32, "56 reports, bounded to max_evidence");
    assert!(f.evidence.iter().all(|e| e.topic == "unicron.logs"));
    // Detected at the end of the 5 s window, well before the 30 s deadline.
    assert!(f.detected_ms < T0 + 19_000 + 30_000, "{}", f.detected_ms);
}

#[test]
fn symptoms_after_a_heartbeat_loss_become_its_evidence() {
    let mut h = Harness::new();
    for s in 0..60 {
        for i in 0..4 {
            if i != 1 || s < 10 {
                h.heartbeat(&node(i), Some("j"), T0 + s * 1000);
            }
        }
    }
    // n1 was reported lost at ~42 s; the ranks' timeouts come at 45 s.
    assert_eq!(h.failures.len(), 1);
    for i in [0, 2, 3] {
        h.log(&node(i), Some("j"), Some(i as i32), T0 + 45_000, "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1234> with error 12, opcode 0, len 0, vendor err 129");
    }
    for s in 45..70 {
        h.heartbeat("n0", Some("j"), T0 + s * 1000);
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    assert_eq!(h.detector.stats().absorbed, 3);
}

#[test]
fn an_exit_explained_by_a_classified_error_is_not_a_second_failure() {
    let mut h = Harness::new();
    h.heartbeat("n0", Some("j"), T0);
    h.log(
        "n1",
        Some("j"),
        Some(9),
        T0 + 1000,
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    );
    let mut exit = agent("n1", Some("j"), T0 + 1200, AgentEventKind::ProcessExit);
    exit.exit_code = Some(1);
    exit.rank = Some(9);
    h.feed("unicron.agent", Observation::Agent(exit));
    for s in 2..20 {
        h.heartbeat("n0", Some("j"), T0 + s * 1000);
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    assert_eq!(h.failures[0].kind, FailureKind::IllegalMemoryAccess);
    assert_eq!(h.failures[0].rank, Some(9));
}

#[test]
fn an_unexplained_abnormal_exit_is_its_own_failure_and_sigterm_is_none() {
    let mut h = Harness::new();
    let mut killed = agent("n1", Some("j"), T0, AgentEventKind::ProcessExit);
    killed.signal = Some(9);
    h.feed("unicron.agent", Observation::Agent(killed));
    let mut stopped = agent("n2", Some("k"), T0, AgentEventKind::ProcessExit);
    stopped.signal = Some(15);
    h.feed("unicron.agent", Observation::Agent(stopped));
    let mut code143 = agent("n2", Some("k"), T0, AgentEventKind::ProcessExit);
    code143.exit_code = Some(143);
    h.feed("unicron.agent", Observation::Agent(code143));
    // Killed by a signal: where the fault is, emitted at once.
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    assert_eq!(h.failures[0].rule.as_deref(), Some("process.signal"));
    for s in 1..10 {
        h.heartbeat("n0", None, T0 + s * 1000);
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    let f = &h.failures[0];
    assert_eq!(
        (f.kind, f.severity, f.method),
        (
            FailureKind::ExitedAbnormally,
            Severity::Sev2,
            DetectionMethod::ProcessSupervision
        )
    );
    assert_eq!(f.node.as_deref(), Some("n1"));
}

#[test]
fn a_stalled_job_is_a_hang_after_three_mean_iterations() {
    let mut h = Harness::with(DetectorConfig {
        hang_min_stall_s: 0.0,
        ..slow_timers()
    });
    for it in 0..10 {
        for rank in 0..4 {
            h.iteration(&node(rank as usize), "j", rank, it, T0 + it * 1000, 1000.0);
        }
    }
    // Rank 2 never finishes iteration 10; the others do.
    for rank in [0, 1, 3] {
        h.iteration(&node(rank as usize), "j", rank, 10, T0 + 10_000, 1000.0);
    }
    for s in 11..30 {
        h.heartbeat("n0", Some("j"), T0 + s * 1000);
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    let f = &h.failures[0];
    assert_eq!(
        (f.kind, f.method),
        (FailureKind::TaskHang, DetectionMethod::Statistical)
    );
    assert_eq!(f.node.as_deref(), Some("n2"), "the rank furthest behind");
    // Last progress at 10 s; 3 × 1 s later, plus the lateness.
    assert!(
        f.detected_ms >= T0 + 13_000 + 2_000 && f.detected_ms <= T0 + 16_000,
        "{}",
        f.detected_ms
    );
}

#[test]
fn one_slow_iteration_is_a_hang_and_a_slow_rank_is_a_straggler() {
    let mut h = Harness::new();
    for it in 0..30 {
        for rank in 0..4 {
            let took = if rank == 1 { 1400.0 } else { 1000.0 };
            h.iteration(&node(rank as usize), "j", rank, it, T0 + it * 1500, took);
        }
    }
    let stragglers: Vec<_> = h
        .failures
        .iter()
        .filter(|f| f.kind == FailureKind::Straggler)
        .collect();
    assert_eq!(stragglers.len(), 1, "{:#?}", h.failures);
    assert_eq!(stragglers[0].node.as_deref(), Some("n1"));
    assert_eq!(stragglers[0].severity, Severity::Sev3);
    // Slow against the mean and past the minimum stall (40 s here).
    h.iteration("n0", "j", 0, 30, T0 + 90_000, 45_000.0);
    let hangs: Vec<_> = h
        .failures
        .iter()
        .filter(|f| f.kind == FailureKind::TaskHang)
        .collect();
    assert_eq!(hangs.len(), 1, "{:#?}", h.failures);
    assert_eq!(hangs[0].rule.as_deref(), Some("progress.slow_iteration"));
}

/// Four ranks of a synchronous job, 40 steps, 200 ms apart; `compute`
/// gives a rank's own compute at a step. Every step lasts as long as the
/// slowest compute plus the all-reduce.
fn synchronous(h: &mut Harness, compute: impl Fn(i32, i64) -> f64) {
    for it in 0..40 {
        let slowest = (0..4).map(|r| compute(r, it)).fold(0.0, f64::max);
        for rank in 0..4 {
            h.step(rank, it, T0 + it * 200, slowest + 20.0, compute(rank, it));
        }
    }
}

#[test]
fn the_rank_slow_in_its_own_compute_is_the_straggler_not_those_that_wait() {
    let mut h = Harness::new();
    // From step 10, rank 2's compute takes 1.5×; every step waits for it.
    synchronous(
        &mut h,
        |rank, it| if rank == 2 && it >= 10 { 150.0 } else { 100.0 },
    );
    let found = h.stragglers();
    assert_eq!(found.len(), 1, "{:#?}", h.failures);
    assert_eq!(found[0].node.as_deref(), Some("n2"));
    assert_eq!(found[0].slowdown, Some(1.5));
    assert!(found[0].evidence[0].excerpt.contains("computes in 150 ms"));
    // The (upper) median of a 20-step window turns after 10 slow steps.
    assert_eq!(found[0].first_evidence_ms, T0 + 19 * 200);
}

#[test]
fn a_job_that_reports_every_tenth_step_is_judged_on_its_reports() {
    let mut h = Harness::new();
    for report in 0..40 {
        let it = report * 10;
        for rank in 0..4 {
            let compute = if rank == 3 && report >= 10 {
                160.0
            } else {
                100.0
            };
            h.step(rank, it, T0 + it * 200, 180.0, compute);
        }
    }
    let found = h.stragglers();
    assert_eq!(found.len(), 1, "{:#?}", h.failures);
    assert_eq!(found[0].node.as_deref(), Some("n3"));
    assert_eq!(found[0].slowdown, Some(1.6));
}

#[test]
fn a_job_slow_on_every_rank_or_for_one_step_has_no_straggler() {
    let mut h = Harness::new();
    synchronous(&mut h, |_, it| if it >= 10 { 180.0 } else { 100.0 });
    // Tenfold on every rank at once: each rank's window turns at the same
    // step, and ranks are judged on the same steps, whatever order their
    // reports are read in.
    synchronous(&mut h, |_, it| if it >= 10 { 1000.0 } else { 100.0 });
    synchronous(
        &mut h,
        |rank, it| if rank == 1 && it == 25 { 900.0 } else { 100.0 },
    );
    assert!(h.stragglers().is_empty(), "{:#?}", h.failures);
}

/// Three real gloo ranks' own compute (ms) on one machine, every rank's
/// worker put under the same CPU quota at the 8th step and freed at the
/// 34th. The step each change lands in finds every rank at another point
/// of its work (221.6 against 109.4 and 39.0), and a rank's median over a
/// window that straddles the change can land on that step: 221.6 against
/// its peers' 109.4 was once read as a straggler twice as slow.
const HELD_BACK_ALIKE: [[f64; 3]; 40] = [
    [36.1, 25.6, 34.9],
    [38.6, 31.1, 27.5],
    [40.1, 27.7, 38.8],
    [34.5, 25.5, 41.4],
    [41.9, 28.8, 38.9],
    [26.5, 44.2, 37.7],
    [43.4, 40.5, 32.9],
    [549.4, 707.0, 717.0],
    [619.6, 759.6, 909.1],
    [511.7, 854.4, 770.7],
    [550.0, 669.5, 740.1],
    [620.4, 729.3, 710.1],
    [628.7, 789.6, 768.2],
    [541.6, 841.2, 810.3],
    [710.6, 1009.2, 949.0],
    [611.9, 1033.2, 946.2],
    [749.6, 1218.9, 1029.0],
    [618.1, 968.3, 900.0],
    [701.3, 869.6, 919.4],
    [601.8, 949.3, 766.9],
    [589.5, 949.0, 869.3],
    [672.6, 949.9, 988.1],
    [602.5, 900.8, 909.0],
    [734.9, 1009.9, 1009.7],
    [711.1, 1260.7, 1252.7],
    [693.3, 929.8, 1029.3],
    [562.7, 1049.9, 1209.3],
    [1020.0, 1168.1, 1749.3],
    [669.9, 813.2, 848.5],
    [699.6, 973.7, 1029.6],
    [710.8, 1029.7, 1187.8],
    [852.2, 1087.9, 1150.1],
    [699.9, 1069.5, 929.8],
    [221.6, 109.4, 39.0],
    [45.1, 50.8, 38.0],
    [26.7, 40.4, 33.7],
    [26.5, 48.9, 46.9],
    [38.8, 28.1, 37.6],
    [29.4, 40.8, 39.0],
    [38.8, 45.7, 30.6],
];

#[test]
fn a_window_straddling_a_change_on_every_rank_has_no_straggler() {
    let config = DetectorConfig {
        straggler_factor: 1.5,
        straggler_window: 10,
        ..slow_timers()
    };
    let feed = |held_back: Option<usize>| {
        let mut h = Harness::with(config.clone());
        let mut t = T0;
        for (it, computes) in HELD_BACK_ALIKE.iter().enumerate() {
            let slowest = computes.iter().copied().fold(0.0, f64::max);
            t += slowest as i64 + 60;
            for rank in 0..3 {
                // The control: rank `r` alone held back, its peers calm.
                let compute = match held_back {
                    Some(r) if r != rank && it >= 7 => HELD_BACK_ALIKE[it % 7][rank],
                    _ => computes[rank],
                };
                h.step(rank as i32, it as i64, t, slowest + 60.0, compute);
            }
        }
        h
    };
    let alike = feed(None);
    assert!(alike.stragglers().is_empty(), "{:#?}", alike.failures);
    let one = feed(Some(1));
    let found = one.stragglers();
    assert_eq!(found.len(), 1, "{:#?}", one.failures);
    assert_eq!(found[0].node.as_deref(), Some("n1"));
}

#[test]
fn dcgm_xids_and_error_counters_are_failures_once() {
    let mut h = Harness::new();
    // Last-value XID: a repeated scrape of the same code is one failure.
    for s in 0..3 {
        h.sample("n0", "DCGM_FI_DEV_XID_ERRORS", 0.0, T0 + s * 1000, &[]);
    }
    for s in 3..6 {
        h.sample("n0", "DCGM_FI_DEV_XID_ERRORS", 79.0, T0 + s * 1000, &[]);
    }
    // Counter with an xid label: the first value is a baseline.
    h.sample("n1", "DCGM_EXP_XID_ERRORS_COUNT", 2.0, T0, &[("xid", "48")]);
    h.sample(
        "n1",
        "DCGM_EXP_XID_ERRORS_COUNT",
        2.0,
        T0 + 1000,
        &[("xid", "48")],
    );
    h.sample(
        "n1",
        "DCGM_EXP_XID_ERRORS_COUNT",
        3.0,
        T0 + 2000,
        &[("xid", "48")],
    );
    // NVLink replay errors: below threshold, then above.
    h.sample(
        "n2",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        10.0,
        T0,
        &[],
    );
    h.sample(
        "n2",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        50.0,
        T0 + 1000,
        &[],
    );
    h.sample(
        "n2",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        400.0,
        T0 + 2000,
        &[],
    );
    let kinds: Vec<(Option<&str>, FailureKind)> = h
        .failures
        .iter()
        .map(|f| (f.node.as_deref(), f.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (Some("n0"), FailureKind::GpuDriverError),
            (Some("n1"), FailureKind::EccError),
            (Some("n2"), FailureKind::NvlinkError),
        ]
    );
    assert!(
        h.failures
            .iter()
            .all(|f| f.method == DetectionMethod::MetricRule && f.gpu == Some(0))
    );
    assert!(h.rejected.is_empty());
}

#[test]
fn impossible_values_and_times_are_rejected_and_processing_goes_on() {
    let mut h = Harness::new();
    h.sample("n0", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", f64::NAN, T0, &[]);
    h.sample("n0", "some_unwatched_metric", f64::NAN, T0, &[]);
    h.sample("n0", "DCGM_EXP_XID_ERRORS_COUNT", 1.0, T0, &[]);
    h.log(
        "n0",
        None,
        None,
        1_000,
        "RuntimeError: CUDA error: unspecified launch failure",
    );
    h.heartbeat("n0", None, T0);
    h.heartbeat("n0", None, T0 + 40 * 365 * 86_400_000);
    let mut bad = agent("n0", Some("j"), T0, AgentEventKind::IterationDone);
    bad.iteration_time_ms = Some(f64::INFINITY);
    h.feed("unicron.agent", Observation::Agent(bad));
    assert_eq!(h.rejected.len(), 5, "{:#?}", h.rejected);
    assert!(h.rejected[0].contains("not a finite number"));
    assert!(h.rejected[1].contains("without an `xid` label"));
    assert!(h.rejected[2].contains("outside 2000..2100"));
    assert!(h.rejected[3].contains("ahead of the cluster's newest record"));
    // A good record after all that is still classified.
    h.log(
        "n0",
        None,
        None,
        T0 + 1000,
        "RuntimeError: CUDA error: unspecified launch failure",
    );
    assert_eq!(h.failures.len(), 1);
}

#[test]
fn repeated_sev3_faults_on_a_node_escalate_and_close_repeats_are_deduplicated() {
    let mut h = Harness::new();
    let down = "kernel: mlx5_core 0000:3b:00.0 ens1f0np0: Link down";
    h.log("n0", None, None, T0, down);
    h.log("n0", None, None, T0 + 10_000, down); // within the dedupe window
    h.log("n0", None, None, T0 + 120_000, down); // a repeat within 5 minutes
    let severities: Vec<Severity> = h.failures.iter().map(|f| f.severity).collect();
    assert_eq!(severities, vec![Severity::Sev3, Severity::Sev2]);
    assert_eq!(h.detector.stats().absorbed, 1);
}

#[test]
fn the_same_inputs_give_identical_outputs() {
    let run = || {
        let mut h = Harness::new();
        for s in 0..50 {
            for i in 0..3 {
                if i != 2 || s < 5 {
                    h.heartbeat(&node(i), Some("j"), T0 + s * 1000);
                }
            }
            h.log(
                "n1",
                Some("j"),
                None,
                T0 + s * 1000,
                "kernel: bnxt_en eth2: NIC Link is Down",
            );
        }
        h.failures
    };
    let (a, b) = (run(), run());
    assert!(!a.is_empty());
    assert_eq!(a, b);
    let mut ids: Vec<&str> = a.iter().map(|f| f.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), a.len());
}

/// A consumer catching up reads partitions unevenly: a node whose
/// heartbeats sit unread in a lagging partition is behind, not lost. Once
/// that partition is caught up and still has nothing newer, it is lost.
#[test]
fn a_lagging_partition_holds_the_heartbeat_timers_back() {
    let mut detector = Detector::new(slow_timers(), LogRules::builtin());
    let mut offsets = BTreeMap::<i32, i64>::new();
    let mut feed = |node: &str, partition: i32, t: i64, caught_up: bool| -> Vec<FailureEvent> {
        let offset = offsets.entry(partition).or_default();
        *offset += 1;
        detector
            .apply(&DetectorInput {
                source: SourceRecord {
                    topic: "unicron.agent".into(),
                    partition,
                    offset: *offset,
                    index: 0,
                },
                observation: Observation::Agent(agent(node, None, t, AgentEventKind::Heartbeat)),
                caught_up,
            })
            .into_iter()
            .filter_map(|o| match o {
                DetectorOutput::Failure(f) => Some(f),
                DetectorOutput::Rejected(_) => None,
            })
            .collect()
    };
    // Partition 1 (node b) is read first, but only up to 5 s: it is behind.
    assert!(feed("b", 1, T0, false).is_empty());
    assert!(feed("b", 1, T0 + 5_000, false).is_empty());
    // Partition 0 (node a) is read to its end, five minutes ahead.
    for s in 0..=300 {
        let found = feed("a", 0, T0 + s * 1000, true);
        assert!(found.is_empty(), "b is behind, not lost: {found:?}");
    }
    // b's partition catches up and has nothing newer: b went silent at 5 s.
    let found = feed("b", 1, T0 + 5_000, true);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, FailureKind::LostConnection);
    assert_eq!(found[0].node.as_deref(), Some("b"));
}

#[test]
fn held_silence_timers_wait_for_records_queued_in_an_outage() {
    // n0's records come through first after an outage; n1's heartbeats,
    // queued meanwhile, arrive later. Held, n1 is not declared lost; once
    // released, a node that really stopped (n2) still is.
    let mut h = Harness::new();
    for s in 0..10 {
        for n in ["n0", "n1", "n2"] {
            h.heartbeat(n, None, T0 + s * 1000);
        }
    }
    h.detector.hold_silence_timers(true);
    assert!(h.detector.silence_timers_held());
    for s in 10..70 {
        h.heartbeat("n0", None, T0 + s * 1000);
    }
    assert!(h.failures.is_empty(), "{:#?}", h.failures);
    for s in 10..70 {
        h.heartbeat("n1", None, T0 + s * 1000);
    }
    h.detector.hold_silence_timers(false);
    h.heartbeat("n0", None, T0 + 70_000);
    let lost: Vec<_> = h.failures.iter().map(|f| f.node.clone()).collect();
    assert_eq!(lost, vec![Some("n2".to_string())]);
    assert_eq!(h.failures[0].kind, FailureKind::LostConnection);
}

#[test]
fn without_the_hold_the_same_order_reads_as_heartbeat_loss() {
    // The control for the test above: the order alone fools the timers.
    let mut h = Harness::new();
    for s in 0..10 {
        for n in ["n0", "n1"] {
            h.heartbeat(n, None, T0 + s * 1000);
        }
    }
    for s in 10..70 {
        h.heartbeat("n0", None, T0 + s * 1000);
    }
    let lost: Vec<_> = h.failures.iter().map(|f| f.node.clone()).collect();
    assert_eq!(lost, vec![Some("n1".to_string())]);
}

#[test]
fn a_late_record_of_an_older_iteration_does_not_rearm_the_hang() {
    // A CUDA error at 10.5 s explains job j's stall. Rank 3's record of
    // iteration 10 (completed at 10 s) is read only after it, as happens
    // across partitions; in event-time order it came first. Either way the
    // stall is reported once, as the CUDA error.
    let mut h = Harness::with(DetectorConfig {
        hang_min_stall_s: 0.0,
        ..slow_timers()
    });
    for it in 0..=10 {
        for rank in 0..3 {
            h.iteration(&node(rank as usize), "j", rank, it, T0 + it * 1000, 1000.0);
        }
    }
    h.log(
        "n0",
        Some("j"),
        Some(0),
        T0 + 10_500,
        "RuntimeError: CUDA error: unspecified launch failure",
    );
    h.iteration(&node(3), "j", 3, 10, T0 + 10_000, 1000.0);
    for s in 11..40 {
        h.heartbeat("n0", Some("j"), T0 + s * 1000);
    }
    let kinds: Vec<_> = h.failures.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, vec![FailureKind::CudaError], "{:#?}", h.failures);

    // Progress after the failure re-arms the timer: a second stall is a hang.
    for it in 41..=50 {
        for rank in 0..4 {
            h.iteration(&node(rank as usize), "j", rank, it, T0 + it * 1000, 1000.0);
        }
    }
    for s in 51..70 {
        h.heartbeat("n0", Some("j"), T0 + s * 1000);
    }
    let kinds: Vec<_> = h.failures.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        vec![FailureKind::CudaError, FailureKind::TaskHang],
        "{:#?}",
        h.failures
    );
}

/// n1 dies at 200 s; job j (20 s iterations) stalls with it. One at a
/// time, the heartbeat deadline (229 s) fires before the hang deadline
/// (240 s), and the loss explains the stall. With the timers held over
/// both deadlines and released at once, the result must be the same.
fn node_loss_stalling_a_job(hold: bool) -> Vec<(FailureKind, Option<String>)> {
    let mut h = Harness::with(DetectorConfig {
        hang_min_stall_s: 0.0,
        ..slow_timers()
    });
    for s in 0..400 {
        let t = T0 + s * 1000;
        if s % 20 == 0 && s < 200 {
            for rank in 0..4 {
                h.iteration(&node(rank as usize), "j", rank, s / 20, t, 20_000.0);
            }
        }
        if s == 200 {
            h.detector.hold_silence_timers(hold);
        }
        for i in (0..4).filter(|&i| i != 1 || s < 200) {
            h.heartbeat(&node(i), Some("j"), t);
        }
    }
    h.detector.hold_silence_timers(false);
    h.heartbeat("n0", Some("j"), T0 + 400_000);
    h.failures
        .iter()
        .map(|f| (f.kind, f.node.clone()))
        .collect()
}

#[test]
fn timers_released_together_act_in_deadline_order() {
    let one_at_a_time = node_loss_stalling_a_job(false);
    assert_eq!(
        one_at_a_time,
        vec![(FailureKind::LostConnection, Some("n1".to_string()))]
    );
    assert_eq!(node_loss_stalling_a_job(true), one_at_a_time);
}

#[test]
fn with_the_default_timers_a_dead_node_is_reported_within_five_seconds() {
    let mut h = Harness::with(DetectorConfig::default());
    // Four nodes beat every second; n3 dies after 20 s.
    for s in 0..40 {
        let t = T0 + s * 1000;
        for n in 0..4 {
            if n != 3 || s < 20 {
                h.heartbeat(&node(n), None, t);
            }
        }
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    let f = &h.failures[0];
    assert_eq!(f.node.as_deref(), Some("n3"));
    let delay = f.detected_ms - (T0 + 19_000);
    assert!(
        (3_000..=5_000).contains(&delay),
        "{delay} ms after the last beat"
    );
}

#[test]
fn one_node_clock_ten_seconds_off_makes_no_other_node_look_silent() {
    for skew in [10_000, -10_000] {
        let mut h = Harness::with(DetectorConfig::default());
        // n0 and n1 keep time, n2 runs `skew` off; a log line of n2's now
        // and then. Records arrive in the order they are sent.
        for s in 0..60 {
            let t = T0 + s * 1000;
            h.heartbeat("n0", None, t);
            h.heartbeat("n1", None, t);
            h.heartbeat("n2", None, t + skew);
            if s % 7 == 0 {
                h.log("n2", None, None, t + skew, "step 1200 loss 2.31");
            }
        }
        assert!(h.failures.is_empty(), "skew {skew}: {:#?}", h.failures);
        // The skewed node itself is still watched: it stops, it is lost.
        for s in 60..70 {
            let t = T0 + s * 1000;
            h.heartbeat("n0", None, t);
            h.heartbeat("n1", None, t);
        }
        let lost: Vec<_> = h.failures.iter().map(|f| f.node.clone()).collect();
        assert_eq!(lost, vec![Some("n2".to_string())], "skew {skew}");
    }
}

#[test]
fn a_lone_survivor_still_sees_the_others_go_silent() {
    let mut h = Harness::with(DetectorConfig::default());
    for s in 0..10 {
        for n in 0..3 {
            h.heartbeat(&node(n), None, T0 + s * 1000);
        }
    }
    // n1 and n2 die together; only n0 goes on.
    for s in 10..60 {
        h.heartbeat("n0", None, T0 + s * 1000);
    }
    let mut lost: Vec<_> = h.failures.iter().map(|f| f.node.clone().unwrap()).collect();
    lost.sort();
    assert_eq!(lost, vec!["n1", "n2"], "{:#?}", h.failures);
}

#[test]
fn a_second_loss_among_three_nodes_is_seen_as_fast_as_the_first() {
    let mut h = Harness::with(DetectorConfig::default());
    // n2 dies at 10 s; n1 at 20 s, with only n0 left beating.
    for s in 0..40 {
        let t = T0 + s * 1000;
        h.heartbeat("n0", None, t);
        if s < 20 {
            h.heartbeat("n1", None, t);
        }
        if s < 10 {
            h.heartbeat("n2", None, t);
        }
    }
    let lost: Vec<_> = h
        .failures
        .iter()
        .map(|f| (f.node.clone().unwrap(), f.detected_ms))
        .collect();
    assert_eq!(lost.len(), 2, "{lost:?}");
    assert_eq!(lost[1].0, "n1");
    // Not held back by the first lost node's stale clock (30 s of skew).
    let delay = lost[1].1 - (T0 + 19_000);
    assert!(
        (3_000..=5_000).contains(&delay),
        "{delay} ms after n1's last beat"
    );
}

#[test]
fn an_agent_that_leaves_is_no_lost_node_until_it_beats_again() {
    let mut h = Harness::with(DetectorConfig::default());
    for s in 0..10 {
        h.heartbeat("n0", None, T0 + s * 1000);
        h.heartbeat("n1", None, T0 + s * 1000);
    }
    h.feed(
        "unicron.agent",
        Observation::Agent(agent("n1", None, T0 + 9_500, AgentEventKind::Leaving)),
    );
    for s in 10..30 {
        h.heartbeat("n0", None, T0 + s * 1000);
    }
    assert!(h.failures.is_empty(), "{:#?}", h.failures);
    // Back, and then silent without a word: lost.
    h.heartbeat("n1", None, T0 + 30_000);
    for s in 30..40 {
        h.heartbeat("n0", None, T0 + s * 1000);
    }
    let lost: Vec<_> = h.failures.iter().map(|f| f.node.clone()).collect();
    assert_eq!(lost, vec![Some("n1".to_string())]);
}

#[test]
fn an_idle_tick_releases_a_held_symptom_on_a_quiet_input() {
    let mut h = Harness::with(DetectorConfig::default());
    // The cluster's only input: one log line, then nothing.
    h.log(
        "n0",
        Some("j1"),
        Some(3),
        T0,
        "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<5132> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
    );
    assert!(h.failures.is_empty(), "held as a symptom");
    assert_eq!(
        h.detector.idle_candidates(),
        vec![("c1".to_string(), T0)],
        "waiting on a tick"
    );
    let mut tick = AgentEvent::idle("c1", "unicron-detector", T0 + 2_000);
    h.feed("unicron.agent", Observation::Agent(tick.clone()));
    assert!(h.failures.is_empty(), "window not yet past the watermark");
    tick.time_ms = T0 + 4_000;
    h.feed("unicron.agent", Observation::Agent(tick));
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    assert_eq!(h.failures[0].kind, FailureKind::NetworkError);
    assert_eq!(h.failures[0].node.as_deref(), Some("n0"));
    assert!(h.detector.idle_candidates().is_empty(), "nothing pending");
    // The tick is not a node: nobody is watched for its silence.
    assert!(h.rejected.is_empty(), "{:?}", h.rejected);
}

#[test]
fn a_partition_still_being_read_gets_no_idle_tick() {
    let mut detector = Detector::new(DetectorConfig::default(), LogRules::builtin());
    let input = DetectorInput {
        source: SourceRecord {
            topic: "unicron.agent".into(),
            partition: 0,
            offset: 0,
            index: 0,
        },
        observation: Observation::Agent(agent("n0", None, T0, AgentEventKind::Heartbeat)),
        caught_up: false,
    };
    detector.apply(&input);
    assert!(detector.idle_candidates().is_empty());
    let caught_up = DetectorInput {
        caught_up: true,
        ..input
    };
    detector.apply(&caught_up);
    assert_eq!(detector.idle_candidates(), vec![("c1".to_string(), T0)]);
}

#[test]
fn an_idle_tick_leaves_the_partition_it_sits_on_alone() {
    let mut detector = Detector::new(DetectorConfig::default(), LogRules::builtin());
    let on = |partition, observation, caught_up| DetectorInput {
        source: SourceRecord {
            topic: "unicron.agent".into(),
            partition,
            offset: 0,
            index: 0,
        },
        observation,
        caught_up,
    };
    // Partition 1 is behind for c1: no tick is due.
    let beat = Observation::Agent(agent("n0", None, T0, AgentEventKind::Heartbeat));
    detector.apply(&on(1, beat, false));
    assert!(detector.idle_candidates().is_empty());
    // A tick applied from partition 1 (where it was written) does not mark
    // that partition caught up: the consumer has not read it to its end.
    let tick = AgentEvent::idle("c1", "unicron-detector", T0 + 1_000);
    detector.apply(&on(1, Observation::Agent(tick), true));
    assert!(detector.idle_candidates().is_empty());
}

#[test]
fn a_partition_found_caught_up_later_releases_the_watermark() {
    let mut h = Harness::with(DetectorConfig::default());
    // A symptom read from a partition that looked behind when it was read.
    let input = DetectorInput {
        source: SourceRecord {
            topic: "unicron.logs".into(),
            partition: 4,
            offset: 9,
            index: 0,
        },
        observation: Observation::Log(LogRecord {
            cluster: "c1".into(),
            node: "n0".into(),
            time_ms: T0,
            source: "test".into(),
            job: Some("j".into()),
            rank: None,
            gpu: None,
            line: "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.".into(),
            attributes: BTreeMap::new(),
        }),
        caught_up: false,
    };
    h.detector.apply(&input);
    for s in 1..20 {
        h.heartbeat("n1", Some("j"), T0 + s * 1000);
    }
    assert!(h.failures.is_empty(), "held back by the partition");
    assert_eq!(
        h.detector.behind_partitions(),
        vec![("unicron.logs".to_string(), 4)]
    );
    h.detector.mark_caught_up("unicron.logs", 4);
    assert!(h.detector.behind_partitions().is_empty());
    h.heartbeat("n1", Some("j"), T0 + 20_000);
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    assert_eq!(h.failures[0].kind, FailureKind::NetworkError);
}

#[test]
fn a_worker_killed_by_a_signal_absorbs_its_peers_exits_and_resets() {
    let mut h = Harness::new();
    let mut killed = agent("n1", Some("j"), T0, AgentEventKind::ProcessExit);
    killed.signal = Some(9);
    h.feed("unicron.agent", Observation::Agent(killed));
    assert_eq!(h.failures.len(), 1, "emitted at once");
    let mut peer = agent("n2", Some("j"), T0 + 200, AgentEventKind::ProcessExit);
    peer.exit_code = Some(1);
    h.feed("unicron.agent", Observation::Agent(peer));
    h.log(
        "n2",
        Some("j"),
        Some(1),
        T0 + 150,
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:47934",
    );
    for s in 1..20 {
        h.heartbeat("n1", Some("j"), T0 + s * 1000);
        h.heartbeat("n2", Some("j"), T0 + s * 1000);
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    assert_eq!(h.failures[0].node.as_deref(), Some("n1"));
}

/// Silence is judged against nodes still heard. One node silent while the
/// others report is lost after its deadline; every node silent at once
/// (the network between the cluster and the broker, seen from here) is
/// lost only `all_silent_grace_s` later, however far idle ticks move the
/// clock, and not at all if their heartbeats arrive before that.
#[test]
fn every_node_silent_at_once_waits_the_grace_and_one_silent_node_does_not() {
    let config = DetectorConfig {
        all_silent_grace_s: 60.0,
        ..DetectorConfig::default()
    };
    let tick = |h: &mut Harness, s: i64| {
        h.feed(
            "unicron.agent",
            Observation::Agent(AgentEvent::idle("c1", "unicron-detector", T0 + s * 1000)),
        )
    };
    // Every node silent after 10 s; ticks carry the clock 40 s on.
    let mut h = Harness::with(config.clone());
    for s in 0..=10 {
        for n in ["n1", "n2", "n3"] {
            h.heartbeat(n, None, T0 + s * 1000);
        }
    }
    for s in (12..=50).step_by(2) {
        tick(&mut h, s);
    }
    assert_eq!(h.failures, Vec::new(), "a 40-s silence of every node");
    // Their queued heartbeats arrive: nothing was lost.
    for s in 11..=50 {
        for n in ["n1", "n2", "n3"] {
            h.heartbeat(n, None, T0 + s * 1000);
        }
    }
    for s in (52..=120).step_by(2) {
        tick(&mut h, s);
    }
    let lost: Vec<_> = h.failures.iter().filter_map(|f| f.node.clone()).collect();
    assert_eq!(
        lost,
        ["n1", "n2", "n3"],
        "silent for 70 s: the whole cluster"
    );
    assert!(h.failures.iter().all(|f| f.detected_ms >= T0 + 110_000));

    // One node silent while the others report: lost after its deadline.
    let mut h = Harness::with(config);
    for s in 0..=20 {
        for n in ["n1", "n2", "n3"] {
            if n != "n3" || s <= 10 {
                h.heartbeat(n, None, T0 + s * 1000);
            }
        }
    }
    assert_eq!(h.failures.len(), 1, "{:#?}", h.failures);
    assert_eq!(h.failures[0].node.as_deref(), Some("n3"));
    assert!(h.failures[0].detected_ms < T0 + 16_000);
}

/// Three nodes heard for 10 s, then every one silent for 30 s while idle
/// ticks move the clock: a pipeline outage, seen from the detector.
fn silent_spell(config: DetectorConfig) -> Harness {
    let mut h = Harness::with(config);
    for s in 0..=10 {
        for n in ["n1", "n2", "n3"] {
            h.heartbeat(n, None, T0 + s * 1000);
        }
    }
    for s in (12..=40).step_by(2) {
        h.feed(
            "unicron.agent",
            Observation::Agent(AgentEvent::idle("c1", "unicron-detector", T0 + s * 1000)),
        );
    }
    h
}

/// After every node was silent (a pipeline outage), the first node whose
/// backlog arrives is no proof that the others are silent: they may still
/// be reconnecting. Their backlogs arriving within `resume_grace_s` lose
/// nothing; a node that stays silent past it is lost.
#[test]
fn after_every_node_was_silent_the_others_get_time_to_flush_their_backlog() {
    let config = DetectorConfig {
        all_silent_grace_s: 60.0,
        resume_grace_s: 15.0,
        ..DetectorConfig::default()
    };
    let mut h = silent_spell(config);
    // n1 reconnects first: its 30 s of backlog, then live heartbeats.
    for s in 11..=48 {
        h.heartbeat("n1", None, T0 + s * 1000);
    }
    // n2's backlog lands 8 s later; n3 never comes back.
    for s in 11..=48 {
        h.heartbeat("n2", None, T0 + s * 1000);
    }
    assert_eq!(h.failures, Vec::new(), "{:#?}", h.failures);
    for s in 49..=60 {
        for n in ["n1", "n2"] {
            h.heartbeat(n, None, T0 + s * 1000);
        }
    }
    let lost: Vec<_> = h.failures.iter().filter_map(|f| f.node.clone()).collect();
    assert_eq!(lost, ["n3"], "{:#?}", h.failures);
}

/// After a silence of every node, one node comes back and the two others
/// never do: the two are lost once `resume_grace_s` has passed, and the
/// one that is heard is not. (The cluster's clock trails the survivor by
/// `max_clock_skew_s` while the silent two hold it back, and jumps forward
/// when they are found lost; the survivor's deadline must not have been
/// set against the trailing clock.)
#[test]
fn the_nodes_that_never_come_back_are_lost_and_the_one_that_did_is_not() {
    let config = DetectorConfig {
        all_silent_grace_s: 60.0,
        resume_grace_s: 15.0,
        max_clock_skew_s: 30.0,
        ..DetectorConfig::default()
    };
    let mut h = silent_spell(config);
    // n1 logs between its heartbeats: timers fire between two of them.
    for s in 11..=90 {
        h.heartbeat("n1", None, T0 + s * 1000);
        h.log("n1", None, None, T0 + s * 1000 + 500, "step 1200 loss 2.31");
    }
    let lost: Vec<_> = h.failures.iter().filter_map(|f| f.node.clone()).collect();
    assert_eq!(lost, ["n2", "n3"], "{:#?}", h.failures);
}
