//! The detector's metrics, each declared once (see `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Failure events published, by `kind` and `severity`.
pub const FAILURES: Metric = Metric::counter(
    "unicron_detector_failures_total",
    "Failure events published, by kind and severity.",
);
/// 1 while heartbeat and hang timers wait.
pub const TIMERS_HELD: Metric = Metric::gauge(
    "unicron_detector_silence_timers_held",
    "1 while heartbeat and hang timers wait (a lost broker connection, or the lag guard).",
);
/// Idle ticks applied.
pub const IDLE_TICKS: Metric = Metric::counter(
    "unicron_detector_idle_ticks_total",
    "Idle ticks applied for clusters whose inputs went quiet with a timer pending.",
);
/// Rounds applied and recorded.
pub const ROUNDS: Metric = Metric::counter(
    "unicron_detector_rounds_total",
    "Rounds applied and recorded on the rounds topic.",
);
/// 1 while the lag guard holds the timers.
pub const LAG_GUARD: Metric = Metric::gauge(
    "unicron_detector_lag_guard_held",
    "1 while the lag guard holds heartbeat and hang timers (the detector is behind its inputs).",
);
/// Most unread records on one input partition.
pub const INPUT_LAG: Metric = Metric::gauge(
    "unicron_detector_input_lag_records",
    "Most unread records on one input partition, by the latest fetch.",
);
/// How far the slowest input partition trails, in event time.
pub const PARTITION_DELAY: Metric = Metric::gauge(
    "unicron_detector_partition_delay_seconds",
    "How far the input partition furthest behind trails the newest, in event time, seconds.",
);
/// Time to apply one round.
pub const ROUND_SECONDS: Metric = Metric::histogram(
    "unicron_detector_round_seconds",
    "Time to apply one round (its records classified and correlated, timers fired), seconds.",
);
/// Wall-clock age of a failure's triggering record when it is published.
pub const DETECTION_LATENCY: Metric = Metric::histogram(
    "unicron_detector_detection_latency_seconds",
    "Wall-clock time from the triggering record's Kafka timestamp to its failure event, seconds.",
);
/// Records read again below the committed offsets after a takeover.
pub const WARM_UP_RECORDS: Metric = Metric::counter(
    "unicron_detector_warm_up_records_total",
    "Records read again below the group's committed offsets after a takeover, to rebuild state.",
);
/// Reloads of `detector.rules_file`.
pub const RULES_RELOADS: Metric = Metric::counter(
    "unicron_detector_rules_reloads_total",
    "Changes of detector.rules_file seen, by result: applied, or refused (the rules in use stay).",
);

/// Every metric the detector exports.
/// Records whose observations were refused, by `reason` (`foreign_cluster`:
/// a topic bound to one cluster carried another's).
pub const REJECTED: Metric = Metric::counter(
    "unicron_detector_rejected_total",
    "Records refused in part or whole and dead-lettered, by reason (foreign_cluster: another cluster's on a topic bound to one).",
);

pub const METRICS: &[Metric] = &[
    FAILURES,
    TIMERS_HELD,
    IDLE_TICKS,
    ROUNDS,
    LAG_GUARD,
    INPUT_LAG,
    PARTITION_DELAY,
    ROUND_SECONDS,
    DETECTION_LATENCY,
    WARM_UP_RECORDS,
    RULES_RELOADS,
    REJECTED,
];
