//! How often a job's workers snapshot, chosen at each start from what its
//! agents measured. Young's formula gives the interval that minimises the
//! time lost to snapshots plus the work redone after a failure,
//! T = √(2·C·M) with C the training thread's blocking cost and M the mean
//! time between failures. T is then held above three floors: one step,
//! the replication time (a snapshot every step that a replica cannot keep
//! up with only queues), and C / `snapshot_overhead_budget` (so snapshots
//! never take more than that share of the training time). The result is
//! in steps, the same for every rank, so every rank snapshots the same
//! steps and a common restore step exists.

use super::config::PlannerConfig;
use super::replan;
use super::state::{ClusterState, SnapshotCosts};

/// The interval chosen for a start: steps, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub steps: i64,
    pub reason: String,
}

/// The interval for the next start of `job`.
pub fn choose(config: &PlannerConfig, state: &ClusterState, job: &str) -> Interval {
    let costs = state.jobs.get(job).map(|j| &j.snapshot_costs);
    let Some(measured) = costs.and_then(Measured::of) else {
        return Interval {
            steps: 1,
            reason: "every step: no snapshot cost measured yet (the first snapshots measure it)"
                .into(),
        };
    };
    let mtbf_s = replan::running_s(config, state);
    let mtbf_from = if state.failure_times.len() < 2 {
        "the configured default_running_s"
    } else {
        "the cluster's recent failures"
    };
    let young_s = (2.0 * measured.block_s * mtbf_s).sqrt();
    let budget = config.snapshot_overhead_budget;
    let floors = [
        (young_s, "Young's interval".to_string()),
        (measured.step_s, "one step".to_string()),
        (measured.transfer_s, "the replication time".to_string()),
        (
            measured.block_s / budget,
            format!("the overhead budget of {:.1}%", budget * 100.0),
        ),
    ];
    let (seconds, bound) = floors.iter().fold((0.0_f64, ""), |(best, why), (s, name)| {
        if *s > best {
            (*s, name.as_str())
        } else {
            (best, why)
        }
    });
    let steps = ((seconds / measured.step_s).ceil() as i64).max(1);
    let overhead = measured.block_s / (steps as f64 * measured.step_s);
    Interval {
        steps,
        reason: format!(
            "every {steps} step{} ({:.1} s), set by {bound}: save() blocks {}, a step takes {}, \
             a replica takes {}, mean time between failures {:.0} s from {mtbf_from}; \
             Young's √(2·C·MTBF) = {:.1} s; snapshot overhead {:.2}%",
            if steps == 1 { "" } else { "s" },
            steps as f64 * measured.step_s,
            seconds_text(measured.block_s),
            seconds_text(measured.step_s),
            seconds_text(measured.transfer_s),
            mtbf_s,
            young_s,
            overhead * 100.0,
        ),
    }
}

/// The slowest rank's costs, seconds.
struct Measured {
    block_s: f64,
    step_s: f64,
    transfer_s: f64,
}

impl Measured {
    /// `None` until both a blocking cost and a step time were reported.
    fn of(costs: &SnapshotCosts) -> Option<Measured> {
        let slowest = |m: &std::collections::BTreeMap<i32, i64>| {
            m.values().copied().max().map(|us| us.max(0) as f64 / 1e6)
        };
        let step_s = slowest(&costs.step_us).filter(|s| *s > 0.0)?;
        Some(Measured {
            block_s: slowest(&costs.block_us)?,
            step_s,
            transfer_s: slowest(&costs.transfer_us).unwrap_or(0.0),
        })
    }
}

fn seconds_text(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

/// Notes one snapshot's measured costs for `job` (a report of its agent).
pub fn note(
    costs: &mut SnapshotCosts,
    rank: i32,
    replica: bool,
    block_us: i64,
    step_us: i64,
    transfer_us: i64,
) {
    if replica {
        if transfer_us > 0 {
            costs.transfer_us.insert(rank, transfer_us);
        }
        return;
    }
    if block_us > 0 {
        costs.block_us.insert(rank, block_us);
    }
    if step_us > 0 {
        costs.step_us.insert(rank, step_us);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::state::{Job, JobStatus};
    use crate::records::JobSpec;

    fn state(block_us: i64, step_us: i64, transfer_us: i64, failures: &[i64]) -> ClusterState {
        let mut state = ClusterState::new("c");
        let mut job = Job {
            spec: JobSpec {
                weight: 1.0,
                min_gpus: 8,
                max_gpus: 8,
                unit_gpus: 8,
                dp_degree: 1,
                checkpoint_interval_s: 60,
                throughput: Vec::new(),
            },
            status: JobStatus::Running,
            nodes: vec!["n1".into()],
            peak_gpus: 8,
            launch: None,
            generation: 1,
            restarts: 0,
            snapshots: Default::default(),
            snapshot_costs: Default::default(),
            restore_costs: Default::default(),
            failure_starts: Default::default(),
        };
        note(&mut job.snapshot_costs, 0, false, block_us, step_us, 0);
        note(&mut job.snapshot_costs, 0, true, 0, 0, transfer_us);
        state.jobs.insert("j".into(), job);
        state.failure_times = failures.to_vec();
        state
    }

    #[test]
    fn nothing_measured_means_every_step() {
        let config = PlannerConfig::default();
        let chosen = choose(&config, &ClusterState::new("c"), "j");
        assert_eq!(chosen.steps, 1);
        assert!(
            chosen.reason.contains("no snapshot cost"),
            "{}",
            chosen.reason
        );
    }

    #[test]
    fn youngs_interval_from_the_blocking_cost_and_the_failure_rate() {
        let config = PlannerConfig::default();
        // C = 0.5 s, failures every 1000 s: √(2·0.5·1000) ≈ 31.6 s; the
        // budget floor is 0.5 / 0.02 = 25 s; steps of 1 s: 32 steps.
        let s = state(500_000, 1_000_000, 0, &[0, 1_000_000, 2_000_000]);
        let chosen = choose(&config, &s, "j");
        assert_eq!(chosen.steps, 32, "{}", chosen.reason);
        assert!(chosen.reason.contains("Young"), "{}", chosen.reason);
        assert!(
            chosen.reason.contains("recent failures"),
            "{}",
            chosen.reason
        );
    }

    #[test]
    fn the_floors_hold_the_interval_up() {
        let config = PlannerConfig::default();
        // Frequent failures (every 10 s) and C = 0.5 s: Young says 3.2 s,
        // but 2% overhead needs 25 s between snapshots.
        let chosen = choose(
            &config,
            &state(500_000, 1_000_000, 0, &[0, 10_000, 20_000]),
            "j",
        );
        assert_eq!(chosen.steps, 25, "{}", chosen.reason);
        assert!(
            chosen.reason.contains("overhead budget"),
            "{}",
            chosen.reason
        );
        // A replica that takes 60 s to land sets it.
        let chosen = choose(
            &config,
            &state(500_000, 1_000_000, 60_000_000, &[0, 10_000, 20_000]),
            "j",
        );
        assert_eq!(chosen.steps, 60, "{}", chosen.reason);
        assert!(chosen.reason.contains("replication"), "{}", chosen.reason);
        // A cheap snapshot of a slow step: never less than one step.
        let chosen = choose(
            &config,
            &state(1, 600_000_000, 0, &[0, 10_000, 20_000]),
            "j",
        );
        assert_eq!(chosen.steps, 1, "{}", chosen.reason);
        assert!(chosen.reason.contains("one step"), "{}", chosen.reason);
    }

    #[test]
    fn the_slowest_rank_sets_it_and_replicas_report_only_transfers() {
        let mut costs = SnapshotCosts::default();
        note(&mut costs, 0, false, 100, 1_000, 0);
        note(&mut costs, 1, false, 300, 900, 0);
        note(&mut costs, 1, true, 999, 999, 5_000);
        let m = Measured::of(&costs).expect("measured");
        assert_eq!((m.block_s, m.step_s, m.transfer_s), (300e-6, 1e-3, 5e-3));
        // A newer report of a rank replaces its older one.
        note(&mut costs, 1, false, 200, 0, 0);
        assert_eq!(Measured::of(&costs).unwrap().block_s, 200e-6);
    }
}
