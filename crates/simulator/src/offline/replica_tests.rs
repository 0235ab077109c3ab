use super::tests::offline;
use super::*;
use crate::config::SimConfig;
use unicron_core::{CommandAction, FailureKind};

/// Four heterogeneous jobs on 32 nodes: job-3 runs two 64-GPU replicas
/// on 16 nodes, its iterations take about two minutes.
fn heterogeneous() -> SimConfig {
    SimConfig {
        nodes: 32,
        jobs: 4,
        workload: crate::config::Workload::Heterogeneous,
        mtbf_s: Some(0.0),
        ..SimConfig::default()
    }
}

/// The decisions of a recorded run.
fn decisions(run: &Offline) -> Vec<unicron_core::Decision> {
    let log = run.log.as_ref().expect("recording");
    log.iter()
        .filter_map(|r| match r {
            Logged::Decision(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// A node of job-3 once every job is placed.
fn flagship_node() -> String {
    let mut run = offline(heterogeneous(), None).recording();
    run.run_for(300.0);
    let placed = decisions(&run).last().unwrap().assignment.clone();
    assert_eq!(placed["job-3"].len(), 16, "{placed:?}");
    placed["job-3"][3].clone()
}

/// The planner's WAF for its plan after the heavy job loses a node is
/// what the simulated cluster then runs at: the heavy job keeps both
/// replicas (a light job gives up a node) and nothing counts a partial
/// replica.
#[test]
fn the_planned_waf_is_what_the_cluster_measures_with_multi_node_replicas() {
    let trace = format!("time_s,node,kind\n600,{},ecc_error\n", flagship_node());
    let mut run = offline(heterogeneous(), Some(&trace)).recording();
    let summary = run.run_for(3_600.0);
    assert_eq!(summary.failures_injected, 1);
    let all = decisions(&run);
    let replan = all
        .iter()
        .find(|d| d.reason.contains("isolate"))
        .expect("the SEV1 re-plans");
    let chosen = &replan.alternatives[0];
    assert_eq!(chosen.allocation["job-3"], 128, "{}", replan.reason);
    for (job, gpus) in &chosen.allocation {
        let replica = crate::config::Workload::Heterogeneous
            .job(job[4..].parse().unwrap())
            .0
            .replica_gpus as i32;
        assert_eq!(gpus % replica, 0, "{job}: {gpus} GPUs");
    }
    // Every transition is over: the cluster runs what was planned.
    let measured = run.sim.current_rate();
    let predicted = all.last().unwrap().alternatives[0].waf;
    assert!(
        (measured - predicted).abs() <= 1e-9 * predicted,
        "measured {measured:e}, predicted {predicted:e}"
    );
    assert!(
        (predicted - chosen.waf).abs() <= 1e-9 * predicted,
        "{predicted:e} {:e}",
        chosen.waf
    );
}

/// A hang within a job's first iterations after a start is invisible to
/// the detector's statistics; NCCL's watchdog ends it at the timeout
/// and the job is restarted, rather than stalled for good.
#[test]
fn a_hang_the_statistics_miss_ends_at_the_nccl_timeout() {
    // job-3 starts at about 130 s; its first iteration ends at about 380 s.
    let trace = format!("time_s,node,kind\n300,{},task_hang\n", flagship_node());
    let mut run = offline(heterogeneous(), Some(&trace));
    let summary = run.run_for(3_600.0);
    let hang = &summary.faults[0];
    assert_eq!(hang.kind, FailureKind::TaskHang);
    assert_eq!(hang.resolved_by, Some(CommandAction::Restart), "{hang:?}");
    let after = hang.resolved_ms.unwrap() - hang.injected_ms;
    let timeout = run.sim.config().collective_timeout_ms();
    assert!(
        (timeout..timeout + 60_000).contains(&after),
        "resolved {after} ms after the hang: {hang:?}"
    );
    assert_eq!(run.sim.current_rate(), run.sim.truth().ideal_rate());
}
