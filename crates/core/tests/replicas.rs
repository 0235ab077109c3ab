//! Jobs whose replica spans nodes: a heavy job of 64-GPU replicas (eight
//! 8-GPU nodes each) beside light ones. A node lost costs the heavy job a
//! whole replica unless the plan refills it; no plan may keep, or count, a
//! partial replica.

use std::collections::BTreeMap;

use unicron_core::planner::{Planner, PlannerConfig, PolicyName};
use unicron_core::signing::CommandSigner;
use unicron_core::*;

mod common;

use common::*;

type JobRow = (&'static str, f64, i32, i32, i32, &'static [(i32, f64)]);

/// (id, weight, min, max, unit, points): 20 nodes hold every job at its
/// largest size. `flagship`'s second replica is worth 8 × 60e15; one node
/// of `light` 7.8e15; `mid` (one 16-GPU replica) 64e15.
const JOBS: [JobRow; 3] = [
    (
        "flagship",
        8.0,
        64,
        128,
        64,
        &[(64, 64.0e15), (128, 124.0e15)],
    ),
    ("light", 1.0, 8, 16, 8, &[(8, 8.0e15), (16, 15.8e15)]),
    ("mid", 4.0, 16, 16, 16, &[(16, 16.0e15)]),
];

fn job_event(feed: &mut Feed, id: &str, weight: f64) -> planner::Input {
    let (_, _, min, max, unit, points) = JOBS.iter().find(|j| j.0 == id).unwrap();
    let mut event = ClusterEvent::new("c", feed.tick(1), ClusterEventKind::JobSubmitted);
    event.job_id = Some(id.into());
    event.job = Some(JobSpec {
        weight,
        min_gpus: *min,
        max_gpus: *max,
        unit_gpus: *unit,
        dp_degree: max / unit,
        checkpoint_interval_s: 1800,
        throughput: points
            .iter()
            .map(|&(gpus, flops)| ThroughputPoint { gpus, flops })
            .collect(),
    });
    feed.input("unicron.cluster", planner::InputEvent::Cluster(event))
}

/// Nodes n01..n20 and the jobs (weights by id, `flagship`'s overridable):
/// flagship on n01-n16, light on n17-n18, mid on n19-n20.
fn cluster(policy: PolicyName, flagship_weight: f64) -> (Planner, Feed) {
    // Several isolations within the hour: no blast-radius limit here.
    let config = PlannerConfig {
        policy,
        max_isolations_per_hour: Some(20),
        ..PlannerConfig::default()
    };
    let mut p = Planner::new(config, CommandSigner::from_seed("test", [1; 32]));
    let mut feed = Feed::new();
    for n in 1..=20 {
        p.apply(&feed.node_joined("c", &format!("n{n:02}")));
    }
    for (id, weight, ..) in JOBS {
        let weight = if id == "flagship" {
            flagship_weight
        } else {
            weight
        };
        p.apply(&job_event(&mut feed, id, weight));
    }
    assert_eq!(
        gpus(&p),
        sizes(&[("flagship", 128), ("light", 16), ("mid", 16)])
    );
    (p, feed)
}

fn sizes(list: &[(&str, u32)]) -> BTreeMap<String, u32> {
    list.iter().map(|(j, g)| (j.to_string(), *g)).collect()
}

/// GPUs each job holds now.
fn gpus(p: &Planner) -> BTreeMap<String, u32> {
    let state = p.cluster("c").unwrap();
    state
        .jobs
        .iter()
        .map(|(id, job)| (id.clone(), state.gpus_of(&job.nodes)))
        .collect()
}

/// What the placements yield, as the cluster measures it: each job at its
/// whole replicas only (a partial one computes nothing), weighted.
fn measured_waf(p: &Planner) -> f64 {
    let state = p.cluster("c").unwrap();
    state
        .jobs
        .values()
        .map(|job| {
            let spec = &job.spec;
            let held = state.gpus_of(&job.nodes) as i32;
            let working = held - held % spec.unit_gpus;
            let at = spec.throughput.iter().find(|t| t.gpus == working);
            spec.weight * at.map_or(0.0, |t| t.flops)
        })
        .sum()
}

fn assert_whole_replicas(p: &Planner) {
    let state = p.cluster("c").unwrap();
    for (id, job) in &state.jobs {
        let held = state.gpus_of(&job.nodes) as i32;
        assert_eq!(held % job.spec.unit_gpus, 0, "{id} holds {held} GPUs");
    }
}

#[test]
fn a_node_lost_by_the_heavy_job_is_refilled_from_the_lightest() {
    let (mut p, mut feed) = cluster(PolicyName::Unicron, 8.0);
    let out = p.apply(&feed.failure("c", "n03", FailureKind::EccError));
    assert_eq!(
        gpus(&p),
        sizes(&[("flagship", 128), ("light", 8), ("mid", 16)])
    );
    let state = p.cluster("c").unwrap();
    assert!(!state.jobs["flagship"].nodes.contains(&"n03".to_string()));
    assert!(state.jobs["flagship"].nodes.contains(&"n18".to_string()));
    assert_whole_replicas(&p);
    let chosen = &decision(&out).alternatives[0];
    assert_eq!(chosen.allocation["flagship"], 128);
    assert_eq!(chosen.waf, measured_waf(&p));
    assert_eq!(chosen.waf, 8.0 * 124.0e15 + 8.0e15 + 4.0 * 16.0e15);
}

#[test]
fn a_node_lost_by_a_light_job_leaves_the_heavy_job_alone() {
    let (mut p, mut feed) = cluster(PolicyName::Unicron, 8.0);
    // mid's only replica spans n19-n20: it takes n18 from light.
    let out = p.apply(&feed.failure("c", "n20", FailureKind::EccError));
    assert_eq!(
        gpus(&p),
        sizes(&[("flagship", 128), ("light", 8), ("mid", 16)])
    );
    assert!(
        commands(&out)
            .iter()
            .all(|c| c.job.as_deref() != Some("flagship"))
    );
    assert_whole_replicas(&p);
    assert_eq!(decision(&out).alternatives[0].waf, measured_waf(&p));
}

/// When the heavy job's second replica is worth less than the node it
/// would take, it drops to one whole replica: it neither keeps the seven
/// nodes of the broken one nor counts them, and regrows once a repair
/// makes the replica whole again.
#[test]
fn a_broken_replica_is_released_not_kept() {
    let (mut p, mut feed) = cluster(PolicyName::Unicron, 0.05);
    let out = p.apply(&feed.failure("c", "n03", FailureKind::EccError));
    assert_eq!(
        gpus(&p),
        sizes(&[("flagship", 64), ("light", 16), ("mid", 16)])
    );
    assert_eq!(p.cluster("c").unwrap().free_nodes().len(), 7);
    assert_whole_replicas(&p);
    let chosen = &decision(&out).alternatives[0];
    assert_eq!(chosen.waf, measured_waf(&p));
    assert_eq!(chosen.waf, 0.05 * 64.0e15 + 15.8e15 + 4.0 * 16.0e15);

    p.apply(&feed.node_event("c", "n03", ClusterEventKind::NodeRepaired, ""));
    assert_eq!(
        gpus(&p),
        sizes(&[("flagship", 128), ("light", 16), ("mid", 16)])
    );
}

#[test]
fn the_elastic_baseline_shrinks_to_whole_replicas() {
    let (mut p, mut feed) = cluster(PolicyName::ElasticSingleJob, 8.0);
    let out = p.apply(&feed.failure("c", "n03", FailureKind::EccError));
    // Only the hit job changes, and it keeps what computes.
    assert_eq!(
        gpus(&p),
        sizes(&[("flagship", 64), ("light", 16), ("mid", 16)])
    );
    assert!(
        commands(&out)
            .iter()
            .all(|c| c.job.is_none() || c.job.as_deref() == Some("flagship"))
    );
    assert_eq!(p.cluster("c").unwrap().free_nodes().len(), 7);
    p.apply(&feed.node_event("c", "n03", ClusterEventKind::NodeRepaired, ""));
    assert_eq!(
        gpus(&p),
        sizes(&[("flagship", 128), ("light", 16), ("mid", 16)])
    );
}

/// Free nodes that would not complete a replica are not taken: the heavy
/// job would restart for nothing.
#[test]
fn the_elastic_baseline_takes_no_nodes_short_of_a_replica() {
    let (mut p, mut feed) = cluster(PolicyName::ElasticSingleJob, 8.0);
    p.apply(&feed.failure("c", "n03", FailureKind::EccError));
    // Seven spare nodes, then the flagship loses another: it refills its
    // one replica from them and leaves six spare.
    p.apply(&feed.failure("c", "n04", FailureKind::EccError));
    assert_eq!(gpus(&p)["flagship"], 64);
    // light loses n17 and regrows from a spare node: five left.
    p.apply(&feed.failure("c", "n17", FailureKind::EccError));
    assert_eq!(
        gpus(&p),
        sizes(&[("flagship", 64), ("light", 16), ("mid", 16)])
    );
    assert_eq!(p.cluster("c").unwrap().free_nodes().len(), 5);
    // n03 back: six spare nodes are not a replica.
    let out = p.apply(&feed.node_event("c", "n03", ClusterEventKind::NodeRepaired, ""));
    assert!(
        commands(&out)
            .iter()
            .all(|c| c.job.as_deref() != Some("flagship")),
        "{:?}",
        commands(&out)
    );
    assert_eq!(gpus(&p)["flagship"], 64);
}
