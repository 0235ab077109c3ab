use std::collections::{BTreeMap, BTreeSet};

use super::*;

fn nodes(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node-{i:04}")).collect()
}

#[test]
fn the_built_in_trace_is_read_whole_and_every_category_is_mapped() {
    let trace = RealTrace::infinitehbd();
    assert_eq!(trace.faults.len(), 584);
    assert_eq!(server_ids(&trace.faults).len(), 231);
    assert_eq!(trace.servers, 400);
    let unknown: BTreeSet<(&str, &str)> = trace
        .faults
        .iter()
        .filter(|f| categories::found_by(&f.class, &f.desc).is_none())
        .map(|f| (f.class.as_str(), f.desc.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "categories with no mapping: {unknown:?}"
    );
    // And the table has nothing the trace lacks.
    let seen: BTreeSet<(&str, &str)> = trace
        .faults
        .iter()
        .map(|f| (f.class.as_str(), f.desc.as_str()))
        .collect();
    for (class, desc, _) in categories::INFINITEHBD {
        assert!(seen.contains(&(class, desc)), "{class}/{desc}");
    }
    let mut repairs: Vec<f64> = trace.faults.iter().map(RealFault::repair_s).collect();
    repairs.sort_by(f64::total_cmp);
    let median_days = repairs[repairs.len() / 2] / 86_400.0;
    assert!((0.8..0.9).contains(&median_days), "{median_days}");
    assert!(
        trace
            .faults
            .windows(2)
            .all(|w| w[0].start_s <= w[1].start_s)
    );
}

#[test]
fn the_readings_differ_by_the_check_found_faults_only() {
    let trace = RealTrace::infinitehbd();
    let cluster = nodes(400);
    let every = trace.entries(&cluster, 1, Reading::EveryFaultHitsAJob, Fit::Tile);
    let own = trace.entries(&cluster, 1, Reading::ChecksFindTheirOwn, Fit::Tile);
    let checks = trace
        .faults
        .iter()
        .filter(|f| f.found_by() == FoundBy::Check)
        .count();
    assert_eq!(every.len(), 584);
    assert_eq!(own.len(), 584 - checks);
    assert!((150..250).contains(&checks), "{checks}");
    let lost = |e: &[TraceEntry]| {
        e.iter()
            .filter(|e| e.kind == FailureKind::LostConnection)
            .count()
    };
    assert_eq!(lost(&every), lost(&own) + checks);
    assert!(
        every
            .iter()
            .all(|e| e.repair_s.is_some() && e.category.is_some())
    );
    let stress = every
        .iter()
        .filter(|e| e.category.as_deref() == Some("Stress Test Failure"))
        .count();
    assert_eq!(stress, 97);
}

/// How many faults each node that failed has had, largest first.
fn repeats(entries: &[TraceEntry]) -> Vec<usize> {
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for e in entries {
        *per_node.entry(e.node.as_str()).or_default() += 1;
    }
    let mut counts: Vec<usize> = per_node.into_values().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts
}

#[test]
fn a_seed_draws_which_server_is_which_node_and_keeps_each_servers_faults() {
    let trace = RealTrace::infinitehbd();
    let cluster = nodes(400);
    let one = trace.entries(&cluster, 1, Reading::EveryFaultHitsAJob, Fit::Tile);
    let again = trace.entries(&cluster, 1, Reading::EveryFaultHitsAJob, Fit::Tile);
    let two = trace.entries(&cluster, 2, Reading::EveryFaultHitsAJob, Fit::Tile);
    assert_eq!(one, again);
    assert_ne!(
        one.iter().map(|e| &e.node).collect::<Vec<_>>(),
        two.iter().map(|e| &e.node).collect::<Vec<_>>()
    );
    // The same times, and the same faults per failing server.
    let times = |e: &[TraceEntry]| e.iter().map(|e| e.at_s.to_bits()).collect::<BTreeSet<_>>();
    assert_eq!(times(&one), times(&two));
    assert_eq!(repeats(&one), repeats(&two));
    assert_eq!(repeats(&one)[0], 14);
}

#[test]
fn a_larger_cluster_tiles_shifted_copies_and_a_smaller_one_folds() {
    let trace = RealTrace::infinitehbd();
    // Three whole copies and a fifth of one.
    let tiled = trace.entries(&nodes(1_280), 3, Reading::EveryFaultHitsAJob, Fit::Tile);
    assert!(
        (3 * 584 + 60..3 * 584 + 190).contains(&tiled.len()),
        "{}",
        tiled.len()
    );
    let in_group = |g: usize| {
        tiled
            .iter()
            .filter(|e| {
                let n: usize = e.node[5..].parse().unwrap();
                (g * 400 + 1..=(g + 1) * 400).contains(&n)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(in_group(0).len(), 584);
    assert_eq!(in_group(1).len(), 584);
    // The second copy starts a quarter of the span later, wrapping round.
    let first = in_group(0)[0].at_s;
    let shifted = trace.faults[0].start_s + trace.span_s / 4.0;
    assert!((first - trace.faults[0].start_s).abs() < 1.0, "{first}");
    assert!(in_group(1).iter().any(|e| (e.at_s - shifted).abs() < 1.0));
    assert!(tiled.iter().all(|e| e.at_s < trace.span_s));
    // Sixteen nodes: every fault of the trace, on the sixteen.
    let folded = trace.entries(&nodes(16), 3, Reading::EveryFaultHitsAJob, Fit::Fold);
    assert_eq!(folded.len(), 584);
    assert_eq!(
        folded
            .iter()
            .map(|e| &e.node)
            .collect::<BTreeSet<_>>()
            .len(),
        16
    );
}

#[test]
fn a_day_of_the_trace_starts_at_zero() {
    let trace = RealTrace::infinitehbd();
    let day = trace.busiest_day(Reading::EveryFaultHitsAJob);
    let window = trace.window(f64::from(day) * 86_400.0, 86_400.0);
    let on_day = trace
        .faults
        .iter()
        .filter(|f| (f.start_s / 86_400.0) as u32 == day)
        .count();
    assert_eq!(window.faults.len(), on_day);
    assert!(on_day >= 10, "{on_day}");
    assert!(
        window
            .faults
            .iter()
            .all(|f| (0.0..86_400.0).contains(&f.start_s))
    );
    for other in 0..349 {
        let count = trace
            .window(f64::from(other) * 86_400.0, 86_400.0)
            .faults
            .len();
        assert!(count <= on_day, "day {other}: {count} > {on_day}");
    }
}

#[test]
fn a_simulated_cluster_replays_a_day_of_the_trace_file() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/traces/infinitehbd/fault_trace.json");
    let mut config = crate::config::SimConfig {
        nodes: 16,
        trace: Some(file.clone()),
        ..Default::default()
    };
    let entries = config.load_trace().unwrap().unwrap();
    let trace = RealTrace::infinitehbd();
    let reading = crate::config::DEMONSTRATED;
    let busiest = trace.window(f64::from(trace.busiest_day(reading)) * 86_400.0, 86_400.0);
    let seen = busiest
        .faults
        .iter()
        .filter(|f| reading.hits_as(f.found_by()).is_some())
        .count();
    assert_eq!(entries.len(), seen);
    assert!(seen >= 4, "{seen}");
    assert!(
        entries[0].at_s <= 600.0,
        "at most ten minutes before the first fault"
    );
    let names = config.node_names();
    assert!(
        entries
            .iter()
            .all(|e| names.contains(&e.node) && e.at_s < 86_400.0)
    );
    config.trace_day = Some(400);
    assert_eq!(
        config.load_trace().unwrap_err(),
        "sim.trace_day: 400 is past the trace's 349 days"
    );
    config.trace_day = Some(3);
    assert_eq!(config.load_trace().unwrap().unwrap().len(), 2);
    config.trace = Some(file.with_file_name("missing.csv"));
    assert!(
        config
            .validate()
            .unwrap_err()
            .starts_with("sim.trace_day: only for a real trace")
    );
}
