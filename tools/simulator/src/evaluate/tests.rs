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
    let sweep = ratio_table(std::slice::from_ref(&e));
    assert!(sweep.contains("| 2x | "), "{sweep}");
    assert!(!sweep.contains("vs bamboo"), "not run: {sweep}");
}

#[test]
fn unicron_costs_are_the_measured_ones_scaled_with_state() {
    let paper = scenarios().into_iter().find(|s| s.name == "paper").unwrap();
    // GPT-3 6.7B on 8 GPUs a replica: 13.4 GB a rank at 211 MB/s.
    let state = state_move_s(&paper);
    assert!((63.0..64.0).contains(&state), "{state}");
    let t = unicron_transitions(&paper);
    assert!((t.restart_replica_s - (MEASURED_RESTART_S + state)).abs() < 1e-9);
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
