//! What holds the detector's silence timers, and what moves its clock
//! when inputs go quiet: the only places wall time enters the detector,
//! each turned into an input its rounds record.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use unicron_core::RoundTick;
use unicron_core::detector::Detector;

use crate::metrics::{INPUT_LAG, LAG_GUARD, PARTITION_DELAY};

/// Holds the detector's silence timers from a lost broker connection
/// until `grace` after the latest loss.
pub(crate) struct OutageHold {
    grace: Duration,
    losses: u64,
    until: Option<Instant>,
}

impl OutageHold {
    pub(crate) fn new(grace: Duration, losses: u64) -> OutageHold {
        OutageHold {
            grace,
            losses,
            until: None,
        }
    }

    pub(crate) fn held(&self) -> bool {
        self.until.is_some()
    }

    pub(crate) fn update(&mut self, losses: u64, now: Instant) {
        if losses != self.losses && !self.grace.is_zero() {
            self.losses = losses;
            self.until = Some(now + self.grace);
        } else {
            self.update_time(now);
        }
    }

    pub(crate) fn update_time(&mut self, now: Instant) {
        if self.until.is_some_and(|until| now >= until) {
            self.until = None;
        }
    }
}

/// Holds the silence timers while the detector is behind its inputs: more
/// than `records` unread on a partition, or a partition with unread records
/// whose newest event time read trails the newest of any partition by more
/// than `delay`. A node whose heartbeats wait in a lagging partition is not
/// silent; verdicts wait until the detector catches up (0 turns a bound off).
pub(crate) struct LagGuard {
    records: u64,
    delay_ms: i64,
    held: bool,
}

impl LagGuard {
    pub(crate) fn new(records: u64, delay_s: f64) -> LagGuard {
        LagGuard {
            records,
            delay_ms: (delay_s * 1000.0).round() as i64,
            held: false,
        }
    }

    pub(crate) fn held(&self) -> bool {
        self.held
    }

    pub(crate) fn update(&mut self, lag_records: i64, delay_ms: i64) {
        ::metrics::gauge!(INPUT_LAG.name).set(lag_records as f64);
        ::metrics::gauge!(PARTITION_DELAY.name).set(delay_ms as f64 / 1000.0);
        self.held = (self.records > 0 && lag_records as u64 > self.records)
            || (self.delay_ms > 0 && delay_ms > self.delay_ms);
        ::metrics::gauge!(LAG_GUARD.name).set(if self.held { 1.0 } else { 0.0 });
    }
}

/// Idle ticks: when a cluster with a pending timer has had no record for
/// `after` of wall time on inputs read to their end, its clock moves by
/// that much, through a record on the agent topic that this detector (and
/// replay) reads back. Wall time enters the detector only this way.
pub(crate) struct IdleTicks {
    after: Duration,
    last_heard: BTreeMap<String, Instant>,
}

impl IdleTicks {
    pub(crate) fn new(after: Duration) -> IdleTicks {
        IdleTicks {
            after,
            last_heard: BTreeMap::new(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        !self.after.is_zero()
    }

    /// How often to look for idle clusters (a tick is at most this late)
    /// and at the lag guard.
    pub(crate) fn check_every(&self) -> Duration {
        if self.enabled() {
            (self.after / 4).max(Duration::from_millis(100))
        } else {
            Duration::from_millis(500)
        }
    }

    pub(crate) fn heard_from(&mut self, cluster: &str, now: Instant) {
        match self.last_heard.get_mut(cluster) {
            Some(at) => *at = now,
            None => {
                self.last_heard.insert(cluster.to_string(), now);
            }
        }
    }

    /// The ticks due at `now`. None while silence timers are held: an
    /// outage is no evidence of silence.
    pub(crate) fn due(&mut self, detector: &Detector, now: Instant) -> Vec<RoundTick> {
        if !self.enabled() || detector.silence_timers_held() {
            return Vec::new();
        }
        let mut ticks = Vec::new();
        for (cluster, clock_ms) in detector.idle_candidates() {
            let Some(heard) = self.last_heard.get_mut(&cluster) else {
                self.last_heard.insert(cluster, now);
                continue;
            };
            let quiet = now.saturating_duration_since(*heard);
            if quiet < self.after {
                continue;
            }
            *heard = now;
            ticks.push(RoundTick {
                cluster,
                time_ms: clock_ms + quiet.as_millis() as i64,
            });
        }
        ticks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_loss_holds_the_timers_until_grace_after_the_latest_loss() {
        let mut hold = OutageHold::new(Duration::from_secs(30), 4);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        hold.update(4, at(0));
        assert!(!hold.held(), "no loss yet");
        hold.update(5, at(1));
        assert!(hold.held());
        hold.update(5, at(20));
        assert!(hold.held());
        // Another loss within the hold extends it from then.
        hold.update(7, at(25));
        hold.update(7, at(54));
        assert!(hold.held());
        hold.update_time(at(55));
        assert!(!hold.held(), "released 30 s after the latest loss");
    }

    #[test]
    fn a_zero_grace_never_holds() {
        let mut hold = OutageHold::new(Duration::ZERO, 0);
        hold.update(3, Instant::now());
        assert!(!hold.held());
    }

    #[test]
    fn the_lag_guard_holds_beyond_either_bound_and_not_when_off() {
        let mut guard = LagGuard::new(1_000, 15.0);
        guard.update(10, 0);
        assert!(!guard.held());
        guard.update(1_001, 0);
        assert!(guard.held(), "records");
        guard.update(0, 15_001);
        assert!(guard.held(), "event-time delay");
        guard.update(0, 14_000);
        assert!(!guard.held(), "released once caught up");
        let mut off = LagGuard::new(0, 0.0);
        off.update(1_000_000, 1_000_000);
        assert!(!off.held());
    }
}
