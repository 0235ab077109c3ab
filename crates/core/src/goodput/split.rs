//! The split of one job's time, from its facts sorted by event time.

use super::Split;
use super::facts::{JobFacts, Results};

/// One stop of the job: a failure, and the start it caused.
#[derive(Debug, Clone, Copy)]
struct Outage {
    first_ms: i64,
    detected_ms: i64,
    /// The job's first step after the start; `None`: not yet.
    recovered_ms: Option<i64>,
    /// Where it resumed: `Some(step)` from a snapshot, `None` from a
    /// checkpoint, and unknown (no restore report) as `Err`.
    restored: Result<Option<i64>, ()>,
}

/// When a start command's workers ran again: its slowest rank's first
/// step (agent reports), else its successful result, else not yet; and
/// where they resumed (see [`Outage::restored`]).
fn finished(
    facts: &JobFacts,
    results: &Results,
    start: &super::facts::StartFact,
) -> (Option<i64>, Result<Option<i64>, ()>) {
    match facts.restores.get(&start.id) {
        Some(ranks) if !ranks.is_empty() => {
            let slowest = ranks.iter().map(|r| r.restore_ms).max().unwrap_or(0);
            // Every rank resumes from the same step (the planner's
            // restore point); a checkpoint says `None`.
            let step = ranks.iter().find_map(|r| r.step);
            (Some(start.time_ms + slowest.max(0)), Ok(step))
        }
        _ => (results.get(&start.id), Err(())),
    }
}

/// Starts not caused by a failure of this job (its first start, a re-plan
/// that moves it, another job's failure taking its nodes): the job waits
/// for its nodes from the command until its workers run again.
fn transitions(facts: &JobFacts, results: &Results) -> Vec<(i64, i64)> {
    facts
        .starts
        .iter()
        .filter(|s| {
            !facts
                .failures
                .iter()
                .any(|f| s.causation.iter().any(|c| c == &f.id))
        })
        .map(|s| {
            let (done, _) = finished(facts, results, s);
            (s.time_ms, done.unwrap_or(i64::MAX))
        })
        .collect()
}

fn outages(facts: &JobFacts, results: &Results) -> Vec<Outage> {
    let mut out = Vec::new();
    for f in &facts.failures {
        // The first start command the failure caused.
        let Some(start) = facts
            .starts
            .iter()
            .filter(|s| s.causation.iter().any(|c| c == &f.id))
            .min_by_key(|s| (s.time_ms, s.id.clone()))
        else {
            continue;
        };
        let (recovered_ms, restored) = finished(facts, results, start);
        out.push(Outage {
            first_ms: f.first_evidence_ms.min(f.detected_ms),
            detected_ms: f.detected_ms,
            recovered_ms,
            restored,
        });
    }
    out.sort_by_key(|o| (o.first_ms, o.detected_ms));
    out
}

/// What the job is doing over one stretch of time.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Detection,
    Recovery,
    /// Running (or not) at `gpus` of a peak of `peak` so far.
    Sized {
        gpus: u32,
        peak: u32,
    },
}

pub(super) fn split(facts: &JobFacts, results: &Results, until_ms: i64) -> Split {
    let mut sizes: Vec<(i64, u32)> = facts.sizes.iter().copied().collect();
    sizes.sort();
    let start = facts
        .submitted_ms
        .or_else(|| sizes.first().map(|s| s.0))
        .unwrap_or(until_ms);
    let end = facts.finished_ms.unwrap_or(until_ms).max(start);
    let outages = outages(facts, results);
    let transitions = transitions(facts, results);

    // Every time anything changes, in order.
    let mut bounds: Vec<i64> = vec![start, end];
    bounds.extend(sizes.iter().map(|s| s.0));
    for o in &outages {
        bounds.extend([o.first_ms, o.detected_ms]);
        bounds.extend(o.recovered_ms);
    }
    for (from, to) in &transitions {
        bounds.extend([*from, *to]);
    }
    bounds.retain(|t| (start..=end).contains(t));
    bounds.sort_unstable();
    bounds.dedup();

    let in_outage = |t: i64| -> Option<Phase> {
        let mut recovering = false;
        for o in &outages {
            if t >= o.first_ms && t < o.detected_ms {
                return Some(Phase::Detection);
            }
            recovering |= t >= o.detected_ms && t < o.recovered_ms.unwrap_or(i64::MAX);
        }
        if recovering {
            return Some(Phase::Recovery);
        }
        transitions
            .iter()
            .any(|(from, to)| t >= *from && t < *to)
            .then_some(Phase::Sized { gpus: 0, peak: 0 })
    };

    let mut out = Split {
        wall_s: (end - start) as f64 / 1000.0,
        ..Split::default()
    };
    // The size in force and the peak so far, advanced with the sweep.
    let (mut next, mut gpus, mut peak) = (0, 0u32, 0u32);
    for pair in bounds.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        while next < sizes.len() && sizes[next].0 <= a {
            gpus = sizes[next].1;
            peak = peak.max(gpus);
            next += 1;
        }
        let seconds = (b - a) as f64 / 1000.0;
        match in_outage(a).unwrap_or(Phase::Sized { gpus, peak }) {
            Phase::Detection => out.detection_s += seconds,
            Phase::Recovery => out.recovery_s += seconds,
            Phase::Sized { gpus: 0, .. } => out.waiting_s += seconds,
            Phase::Sized { gpus, peak } => {
                let share = (f64::from(gpus) / f64::from(peak.max(1))).min(1.0);
                out.productive_s += seconds * share;
                out.waiting_s += seconds * (1.0 - share);
            }
        }
    }

    // Work redone and snapshots were counted productive above.
    for o in outages
        .iter()
        .filter(|o| (start..end).contains(&o.first_ms))
    {
        out.failures += 1;
        match o.restored {
            Ok(Some(step)) => {
                if let Some((stored_ms, _)) = facts.steps.get(&step)
                    && *stored_ms <= o.first_ms
                {
                    out.redone_s += (o.first_ms - stored_ms) as f64 / 1000.0;
                }
            }
            Ok(None) => out.checkpoint_restores += 1,
            Err(()) => {}
        }
    }
    let blocked_us: i64 = facts
        .steps
        .values()
        .filter(|(at, _)| (start..end).contains(at))
        .map(|(_, block)| block)
        .sum::<i64>()
        + facts.snapshot_us_folded;
    out.snapshot_s = blocked_us as f64 / 1e6;
    // What was counted productive pays for both, never below zero.
    out.redone_s = out.redone_s.min(out.productive_s);
    out.snapshot_s = out.snapshot_s.min(out.productive_s - out.redone_s);
    out.productive_s -= out.redone_s + out.snapshot_s;
    out
}
