//! The goodput split from the log agrees with the simulator's own
//! accounting of the same run: the time each job did not run.

use super::tests::offline;
use super::*;
use crate::config::SimConfig;
use unicron_core::goodput::Goodput;
use unicron_core::planner::InputEvent;
use unicron_core::status::Record;

fn goodput_of(log: &[Logged], node_gpus: u32) -> Goodput {
    let mut goodput = Goodput::new(node_gpus);
    for logged in log {
        let record = match logged {
            Logged::Cluster(e) => Record::Input(InputEvent::Cluster(e.clone())),
            Logged::Failure(f) => Record::Input(InputEvent::Failure(f.clone())),
            Logged::Result(r) => Record::Input(InputEvent::Result(r.clone())),
            Logged::Decision(d) => Record::Decision(d.clone()),
            Logged::Command(c) => Record::Command(c.clone()),
            _ => continue,
        };
        goodput.apply(&record);
    }
    goodput
}

#[test]
fn the_split_of_the_log_agrees_with_the_simulators_downtime() {
    let config = SimConfig {
        mtbf_s: Some(0.0),
        ..SimConfig::default()
    };
    // Faults that stop a job without shrinking it: a restart, a reattempt,
    // a hang.
    let trace = "time_s,node,kind\n600,node-001,cuda_error\n1200,node-008,nccl_timeout\n1800,node-014,task_hang\n2400,node-004,out_of_memory\n";
    let mut run = offline(config.clone(), Some(trace)).recording();
    let summary = run.run_for(3_600.0);
    assert_eq!(summary.failures_injected, 4);
    let mut goodput = goodput_of(run.log.as_ref().expect("recording"), config.gpus_per_node);
    goodput.saw(&config.cluster, run.sim.now_ms());
    let simulated = run.sim.downtime_s();
    // A hang has no moment in the log: its first evidence is the job's last
    // progress, before the simulator's injection. That gap is the one
    // expected difference between the two accountings.
    let failures: Vec<&unicron_core::FailureEvent> = run
        .log
        .as_ref()
        .expect("recording")
        .iter()
        .filter_map(|l| match l {
            Logged::Failure(f) => Some(f),
            _ => None,
        })
        .collect();
    let mut stopped = 0;
    for (job, down_s) in &simulated {
        let split = goodput
            .job_split(&config.cluster, job)
            .unwrap_or_else(|| panic!("{job} has no split"));
        stopped += split.failures;
        let hang_gap_s: f64 = run
            .sim
            .truth()
            .faults
            .iter()
            .filter(|f| f.job.as_deref() == Some(job.as_str()))
            .filter_map(|fault| {
                let seen = failures
                    .iter()
                    .find(|f| f.job.as_deref() == Some(job.as_str()) && f.kind == fault.kind)?;
                Some((fault.injected_ms - seen.first_evidence_ms).max(0) as f64 / 1000.0)
            })
            .sum();
        // Not running, as the log tells it: pending, detecting, recovering.
        let from_log = split.waiting_s + split.detection_s + split.recovery_s;
        // The simulator counts whole 1-s ticks.
        assert!(
            (from_log - hang_gap_s - down_s).abs() <= 1.0,
            "{job}: the log says {from_log:.1} s down ({hang_gap_s:.1} s of it before a hang's injection), the simulator {down_s:.1} s: {split:?}"
        );
        assert!((split.wall_s - 3_600.0).abs() < 1.0, "{split:?}");
        assert!(
            (split.productive_s + split.redone_s + split.snapshot_s + from_log - split.wall_s)
                .abs()
                < 1e-6
        );
    }
    assert_eq!(stopped, 4, "every fault stopped a job once");
}
