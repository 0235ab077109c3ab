use super::*;
use crate::config::SimConfig;
use crate::faults::parse_trace;
use unicron_core::{CommandAction, FailureKind};

pub(super) fn offline(config: SimConfig, trace: Option<&str>) -> Offline {
    let trace = trace.map(|t| parse_trace(t, "trace").unwrap());
    Offline::new(
        Sim::new(config, trace),
        DetectorConfig::default(),
        PlannerConfig::default(),
    )
}

#[test]
fn each_severity_gets_its_action_once_and_in_bounded_time() {
    let config = SimConfig {
        mtbf_s: Some(0.0),
        ..SimConfig::default()
    };
    let trace = "time_s,node,kind\n600,node-001,nccl_timeout\n1200,node-008,cuda_error\n1800,node-014,ecc_error\n2400,node-004,lost_connection\n3000,node-010,task_hang\n";
    let mut run = offline(config, Some(trace));
    let summary = run.run_for(3_600.0);
    eprintln!("{}", summary.table());
    assert_eq!(summary.failures_injected, 5, "{}", summary.table());
    let want = [
        (FailureKind::NcclTimeout, CommandAction::Reattempt),
        (FailureKind::CudaError, CommandAction::Restart),
        (FailureKind::EccError, CommandAction::IsolateNode),
        (FailureKind::LostConnection, CommandAction::IsolateNode),
        (FailureKind::TaskHang, CommandAction::Restart),
    ];
    for (fault, (kind, action)) in summary.faults.iter().zip(want) {
        assert_eq!(fault.kind, kind);
        assert_eq!(fault.detected_as, Some(kind), "{fault:?}");
        let delay = fault.detected_ms.unwrap() - fault.injected_ms;
        assert!(delay <= 60_000, "{kind}: detected after {delay} ms");
        assert_eq!(fault.resolved_by, Some(action), "{fault:?}");
        let to_action = fault.resolved_ms.unwrap() - fault.injected_ms;
        assert!(to_action <= 90_000, "{kind}: acted on after {to_action} ms");
    }
    assert_eq!(summary.failed_actions, 0, "{}", summary.table());
    assert_eq!(summary.false_detections, 0, "{}", summary.table());
    assert_eq!(run.flow.rejected_commands, 0);
    // Two node losses and five recoveries cost something, not everything.
    assert!(
        summary.waf_fraction > 0.5 && summary.waf_fraction < 1.0,
        "{}",
        summary.waf_fraction
    );
}

#[test]
fn a_repaired_node_comes_back_and_the_cluster_regains_its_ideal_rate() {
    let config = SimConfig {
        mtbf_s: Some(0.0),
        repair_s: 600.0,
        ..SimConfig::default()
    };
    let mut run = offline(
        config,
        Some("time_s,node,kind\n300,node-005,lost_connection\n"),
    );
    let summary = run.run_for(2_400.0);
    let fault = &summary.faults[0];
    assert_eq!(
        fault.resolved_by,
        Some(CommandAction::IsolateNode),
        "{fault:?}"
    );
    // Shrunk around the lost node, then grown back once it is repaired.
    assert!(
        summary
            .actions_by_kind
            .get("reconfigure")
            .copied()
            .unwrap_or(0)
            >= 2,
        "{}",
        summary.table()
    );
    let ideal = run.sim.truth().ideal_rate();
    assert!(
        (run.sim.current_rate() - ideal).abs() < ideal * 1e-9,
        "{} of {ideal}",
        run.sim.current_rate()
    );
    assert_eq!(summary.false_detections, 0, "{}", summary.table());
}

#[test]
fn a_healthy_cluster_comes_close_to_the_ideal() {
    let config = SimConfig {
        mtbf_s: Some(0.0),
        ..SimConfig::default()
    };
    let summary = offline(config, None).run_for(3_600.0);
    assert_eq!(summary.failures_injected, 0);
    assert_eq!(summary.false_detections, 0, "{}", summary.table());
    // All that is lost is the two-minute start: 58/60 of the ideal.
    assert!(
        (summary.waf_fraction - 58.0 / 60.0).abs() < 0.01,
        "{}",
        summary.waf_fraction
    );
    assert_eq!(summary.actions_by_kind.get("resume"), Some(&3));
}

/// `unicron up`'s demonstration: whatever the seed, its first simulated
/// half hour (a minute of real time at 30x) shows a failure of each
/// severity injected, detected and healed, with some minutes to spare.
#[test]
fn demo_arrivals_heal_every_severity_early_whatever_the_seed() {
    use crate::config::{Arrivals, DEMO_MTBF_S};
    use unicron_core::Severity;
    for seed in 0..40 {
        let config = SimConfig {
            seed,
            mtbf_s: Some(DEMO_MTBF_S),
            arrivals: Arrivals::Demo,
            ..SimConfig::default()
        };
        let start = config.start_ms;
        let summary = offline(config, None).run_for(1_800.0);
        for severity in [Severity::Sev1, Severity::Sev2, Severity::Sev3] {
            let healed = summary.faults.iter().find(|f| {
                crate::faults::needs(f.kind) == severity
                    && f.detected_ms.is_some()
                    && f.resolved_ms.is_some_and(|at| at - start <= 1_500_000)
            });
            assert!(
                healed.is_some(),
                "seed {seed}: no {severity} failure healed in 25 minutes\n{}",
                summary.table()
            );
        }
        assert_eq!(
            summary.failed_actions,
            0,
            "seed {seed}\n{}",
            summary.table()
        );
        assert_eq!(
            summary.false_detections,
            0,
            "seed {seed}\n{}",
            summary.table()
        );
    }
}

/// Demo arrivals stay random: another seed, other times and kinds.
#[test]
fn demo_arrivals_differ_by_seed() {
    use crate::config::Arrivals;
    let run = |seed| {
        let config = SimConfig {
            seed,
            mtbf_s: Some(240.0),
            arrivals: Arrivals::Demo,
            ..SimConfig::default()
        };
        offline(config, None).run_for(1_800.0)
    };
    let (a, b) = (run(3), run(4));
    let shape = |s: &Summary| -> Vec<(FailureKind, i64)> {
        s.faults.iter().map(|f| (f.kind, f.injected_ms)).collect()
    };
    assert_ne!(shape(&a), shape(&b));
    assert_eq!(shape(&a), shape(&run(3)));
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let config = |seed| SimConfig {
        seed,
        mtbf_s: Some(600.0),
        ..SimConfig::default()
    };
    let a = offline(config(5), None).run_for(7_200.0);
    let b = offline(config(5), None).run_for(7_200.0);
    assert_eq!(a, b);
    assert!(a.failures_injected >= 3, "{}", a.table());
    let c = offline(config(6), None).run_for(7_200.0);
    assert_ne!(a.faults, c.faults);
}

#[test]
fn a_real_traces_fault_needs_the_node_out_and_stays_out_for_its_repair() {
    // A node that a real trace shows broken for 50 min: its job sees an
    // exit no rule names (SEV2), so the planner restarts first, which
    // fails on the broken node, then takes the node out; the cluster's own
    // repair (10 min) does not apply, the trace's does.
    let config = SimConfig {
        mtbf_s: Some(0.0),
        repair_s: 600.0,
        ..SimConfig::default()
    };
    let trace =
        "time_s,node,kind,repair_s,category\n300,node-005,exited_abnormally,3000,Unknown Error\n";
    let mut run = offline(config, Some(trace));
    let summary = run.run_for(2_400.0);
    let fault = &summary.faults[0];
    assert_eq!(fault.needs, unicron_core::Severity::Sev1);
    assert_eq!(fault.category.as_deref(), Some("Unknown Error"));
    assert_eq!(
        fault.resolved_by,
        Some(CommandAction::IsolateNode),
        "{fault:?}"
    );
    assert!(summary.failed_actions >= 1, "{}", summary.table());
    let ideal = run.sim.truth().ideal_rate();
    assert!(
        run.sim.current_rate() < ideal * 0.999,
        "back before its repair"
    );
    run.run_for(4_200.0);
    assert!(
        (run.sim.current_rate() - ideal).abs() < ideal * 1e-9,
        "{} of {ideal}",
        run.sim.current_rate()
    );
}
