use super::*;
use crate::faults;

fn smoke() -> Scenario {
    scenarios().into_iter().find(|s| s.name == "smoke").unwrap()
}

#[test]
fn every_policy_is_fed_the_same_trace_and_idle_nodes_make_no_ops() {
    // Four times smoke's rate: a dozen failures in six hours.
    let s = Scenario {
        mtbf_s: smoke().mtbf_s / 4.0,
        rate: 8.0,
        ..smoke()
    };
    let trace = s.trace(2);
    assert!(trace.len() >= 8, "{trace:?}");
    // Drawn over every node, whatever runs there.
    let nodes: std::collections::BTreeSet<&str> = trace.iter().map(|e| e.node.as_str()).collect();
    assert!(nodes.len() > 3, "{nodes:?}");
    let runs: Vec<(&str, Run)> = policies(&s)
        .iter()
        .filter(|p| p.cannot_run.is_none())
        .map(|p| (p.name, run(&s, p, 2, &trace)))
        .collect();
    let written = faults::write_trace(&trace);
    for (name, r) in &runs {
        assert_eq!(r.offered_csv, written, "{name}: the trace it reached");
        assert_eq!(r.offered as usize, trace.len(), "{name}");
        assert!(r.failures <= r.offered, "{name}: {r:?}");
        assert!(
            r.waf_fraction > 0.0 && r.waf_fraction < 1.0,
            "{name}: {r:?}"
        );
        assert_eq!(r.timeline.len(), 6);
    }
    // A policy that keeps jobs down longer leaves more of the trace
    // without a running job to hit.
    let hits = |n: &str| runs.iter().find(|(p, _)| *p == n).unwrap().1.failures;
    assert!(
        hits("checkpoint-restart") < hits("unicron"),
        "{} vs {}",
        hits("checkpoint-restart"),
        hits("unicron")
    );
}

#[test]
fn late_detection_and_slow_restarts_cost_the_baseline() {
    let e = evaluate(&smoke(), 2, |_, _| {});
    let unicron = &e.policies["unicron"];
    let baseline = &e.policies["checkpoint-restart"];
    assert!(
        unicron.waf_fraction > baseline.waf_fraction,
        "{}",
        table(&e)
    );
    assert!(unicron.ratio["checkpoint-restart"] > 1.0);
    let (lo, hi) = unicron.ratio_range["checkpoint-restart"];
    assert!(lo <= unicron.ratio["checkpoint-restart"] * 1.0001 && hi >= lo);
    let text = table(&e);
    assert!(text.contains("| unicron |"), "{text}");
    assert!(text.contains("| bamboo | not run: out of memory"), "{text}");
    assert!(!e.policies.contains_key("bamboo"));
    let kinds = downtime_table(&e);
    assert!(kinds.starts_with("| failure kind | unicron |"), "{kinds}");
    let plot = svg(&e);
    assert!(plot.starts_with("<svg") && plot.matches("<polyline").count() == e.policies.len());
    let ratios = ratio_svg(std::slice::from_ref(&e));
    assert!(ratios.contains("vs checkpoint-restart"), "{ratios}");
    let sweep = ratio_table(std::slice::from_ref(&e), "failure rate", |s| {
        format!("{}x", s.rate)
    });
    assert!(sweep.contains("| 2x | "), "{sweep}");
    assert!(!sweep.contains("vs bamboo"), "not run: {sweep}");
}

#[test]
fn unicron_costs_are_the_measured_ones_scaled_with_state() {
    let paper = scenarios().into_iter().find(|s| s.name == "paper").unwrap();
    // GPT-3 6.7B on 8 GPUs a replica: 13.4 GB a rank, restored from
    // memory at the measured rate, and over the wire first after a node
    // loss.
    let from_memory = state_move_s(&paper, MEASURED_RESTORE_MB_S);
    assert!((4.5..6.0).contains(&from_memory), "{from_memory}");
    let from_peer = state_move_s(&paper, MEASURED_REPLICA_MB_S);
    let t = unicron_transitions(&paper);
    assert!((t.restart_replica_s - (MEASURED_RESTART_S + from_memory)).abs() < 1e-9);
    assert!((t.reconfigure_s - (MEASURED_RECONFIGURE_S + from_peer + from_memory)).abs() < 1e-9);
    let doubled = unicron_transitions(&Scenario {
        unicron_cost_factor: 2.0,
        ..paper
    });
    assert!((doubled.reconfigure_s - 2.0 * t.reconfigure_s).abs() < 1e-9);
    assert_eq!(doubled.restart_checkpoint_s, t.restart_checkpoint_s);
}

#[test]
fn evaluation_is_deterministic() {
    let s = smoke();
    let p = &policies(&s)[0];
    assert_eq!(run(&s, p, 9, &s.trace(9)), run(&s, p, 9, &s.trace(9)));
}

#[test]
fn the_real_trace_feeds_every_policy_its_faults_by_category() {
    // The first 40 days of the trace's own 400 servers.
    let whole = scenarios()
        .into_iter()
        .find(|s| s.name == "real-infinitehbd")
        .unwrap();
    let s = Scenario {
        hours: 40.0 * 24.0,
        ..whole
    };
    let trace = s.trace(1);
    assert_eq!(
        trace.len(),
        584,
        "the whole trace, of which 40 days are run"
    );
    let e = evaluate(&s, 1, |_, _| {});
    let offered: Vec<&str> = e
        .policies
        .values()
        .map(|p| p.runs[0].offered_csv.as_str())
        .collect();
    assert!(
        offered.windows(2).all(|w| w[0] == w[1]),
        "one trace for all"
    );
    assert!(offered[0].starts_with("time_s,node,kind,repair_s,category\n"));
    let reached = e.policies["unicron"].runs[0].offered;
    assert!((10..100).contains(&reached), "{reached}");
    let unicron = &e.policies["unicron"].runs[0];
    assert!(unicron.downtime_by_kind.contains_key("GPU"), "{unicron:?}");
    assert!(
        unicron.downtime_by_kind.keys().all(|k| !k.contains('_')),
        "categories, not kinds"
    );
    // A fixed-size restart waits for a repair (days) where unicron shrinks.
    let per_failure = |name: &str| {
        let r = &e.policies[name];
        r.downtime_h / r.runs[0].failures.max(1) as f64
    };
    assert!(per_failure("checkpoint-restart") > 5.0 * per_failure("unicron"));
    let by_category = downtime_table(&e);
    assert!(
        by_category.starts_with("| trace category |"),
        "{by_category}"
    );
    assert!(by_category.contains("\n| GPU | "), "{by_category}");
    assert!(table(&e).contains("failures from the InfiniteHBD trace"));
}
