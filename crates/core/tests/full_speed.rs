//! Keeping jobs at full speed: pre-flight checks before a node is placed,
//! hot spares that keep a job's size, and stragglers replaced when it pays.

use unicron_core::planner::{Health, Input, InputEvent, Planner, PlannerConfig};
use unicron_core::signing::CommandSigner;
use unicron_core::*;

mod common;

use common::*;

fn with(config: PlannerConfig) -> Planner {
    Planner::new(config, CommandSigner::from_seed("test", [1; 32]))
}

/// A planner with pre-flight checks on, and `nodes` joined and checked.
fn checked_pool(nodes: &[&str]) -> (Planner, Feed) {
    let config = PlannerConfig {
        preflight: true,
        ..PlannerConfig::default()
    };
    let (mut p, mut feed) = (with(config), Feed::new());
    for n in nodes {
        p.apply(&feed.node_joined("a", n));
        p.apply(&checked(&mut feed, n, 100.0, &[]));
    }
    (p, feed)
}

fn checked(feed: &mut Feed, node: &str, gflops: f64, failures: &[&str]) -> Input {
    let mut event = ClusterEvent::new("a", feed.tick(1), ClusterEventKind::NodeChecked);
    event.node = Some(node.into());
    event.check = Some(Box::new(NodeCheck {
        duration_ms: 2_500,
        failures: failures.iter().map(|f| f.to_string()).collect(),
        skipped: vec!["gpu: nvidia-smi not found".into()],
        matmul_gflops: Some(gflops),
        memory_gbps: Some(8.0),
        ..NodeCheck::default()
    }));
    feed.input("unicron.cluster", InputEvent::Cluster(event))
}

fn health(p: &Planner, node: &str) -> Health {
    p.cluster("a").unwrap().nodes[node].health
}

fn nodes_of(p: &Planner, job: &str) -> Vec<String> {
    p.cluster("a").unwrap().jobs[job].nodes.clone()
}

fn actions(outputs: &[planner::Output]) -> Vec<(CommandAction, Vec<String>)> {
    commands(outputs)
        .into_iter()
        .map(|c| (c.action, c.nodes))
        .collect()
}

#[test]
fn a_node_is_placed_only_after_its_check_passes() {
    let config = PlannerConfig {
        preflight: true,
        ..PlannerConfig::default()
    };
    let (mut p, mut feed) = (with(config), Feed::new());
    let out = p.apply(&feed.node_joined("a", "n1"));
    assert_eq!(
        actions(&out),
        [(CommandAction::CheckNode, vec!["n1".into()])]
    );
    assert!(decision(&out).reason.contains("no idle checked peer"));
    assert_eq!(health(&p, "n1"), Health::Checking);
    p.apply(&feed.job("a", "j", 8, 16, 2, &[(8, 1.0e15), (16, 2.0e15)]));
    assert!(nodes_of(&p, "j").is_empty(), "an unchecked node was placed");

    let out = p.apply(&checked(&mut feed, "n1", 100.0, &[]));
    assert_eq!(health(&p, "n1"), Health::Healthy);
    assert_eq!(nodes_of(&p, "j"), ["n1"]);
    let reason = decision(&out).reason;
    assert!(
        reason.contains(
            "n1 passed its pre-flight check in 2.5 s (not run: gpu: nvidia-smi not found): admitted"
        ),
        "{reason}"
    );

    // Each admitted node is capacity at once.
    p.apply(&feed.node_joined("a", "n2"));
    p.apply(&checked(&mut feed, "n2", 100.0, &[]));
    assert_eq!(nodes_of(&p, "j"), ["n1", "n2"]);
    p.apply(&feed.job("a", "k", 8, 8, 1, &[(8, 1.0e14)]));
    p.apply(&feed.node_joined("a", "n9"));
    let out = p.apply(&checked(&mut feed, "n9", 100.0, &[]));
    assert_eq!(nodes_of(&p, "k"), ["n9"], "{}", decision(&out).reason);
    // A "repaired" node that was never out stays in service, unchecked.
    let out = p.apply(&feed.node_event("a", "n1", ClusterEventKind::NodeRepaired, "idle"));
    assert!(commands(&out).is_empty(), "{}", decision(&out).reason);
    assert_eq!(health(&p, "n1"), Health::Healthy);
}

#[test]
fn the_pairwise_all_reduce_meets_at_the_checked_node() {
    let (mut p, mut feed) = checked_pool(&["n1"]);
    let out = p.apply(&feed.node_joined("a", "n2"));
    let check = &commands(&out)[0];
    assert_eq!(check.nodes, ["n2", "n1"]);
    let rendezvous = check.rendezvous.as_ref().expect("a pair meets");
    assert_eq!(rendezvous.master_port, 29_499);
    assert_eq!(rendezvous.master_addr, "n2");
}

#[test]
fn a_repaired_node_that_fails_its_check_is_isolated_again_and_never_placed() {
    let (mut p, mut feed) = checked_pool(&["n1", "n2", "n3"]);
    p.apply(&feed.job("a", "j", 8, 24, 3, &[(8, 1.0e15), (24, 3.0e15)]));
    assert_eq!(nodes_of(&p, "j"), ["n1", "n2", "n3"]);
    let isolate = commands(&p.apply(&feed.failure("a", "n2", FailureKind::EccError)))[0].clone();
    p.apply(&feed.result(&isolate, CommandStatus::Succeeded));
    assert_eq!(health(&p, "n2"), Health::Repairing);

    // Repaired: checked first, given back to the scheduler only on a pass.
    let out = p.apply(&feed.node_event("a", "n2", ClusterEventKind::NodeRepaired, "fixed"));
    assert_eq!(
        actions(&out),
        [(CommandAction::CheckNode, vec!["n2".into()])]
    );
    let out = p.apply(&checked(
        &mut feed,
        "n2",
        100.0,
        &["matmul: could not run: CUDA error"],
    ));
    assert_eq!(
        actions(&out),
        [(CommandAction::IsolateNode, vec!["n2".into()])]
    );
    assert!(
        decision(&out)
            .reason
            .contains("check failed: matmul: could not run: CUDA error")
    );
    assert_eq!(health(&p, "n2"), Health::Isolated);
    assert_eq!(nodes_of(&p, "j"), ["n1", "n3"]);

    // Repaired again, and this time it passes: given back and placed.
    p.apply(&feed.node_event("a", "n2", ClusterEventKind::NodeRepaired, "fixed"));
    let out = p.apply(&checked(&mut feed, "n2", 95.0, &[]));
    let done = actions(&out);
    assert_eq!(done[0], (CommandAction::ReturnNode, vec!["n2".into()]));
    assert_eq!(nodes_of(&p, "j"), ["n1", "n2", "n3"]);
}

#[test]
fn a_node_far_below_the_pool_is_slow_and_kept_out() {
    let config = PlannerConfig {
        preflight: true,
        ..PlannerConfig::default()
    };
    let (mut p, mut feed) = (with(config), Feed::new());
    for (n, gflops) in [("n1", 100.0), ("n2", 104.0), ("n3", 98.0), ("n4", 40.0)] {
        p.apply(&feed.node_joined("a", n));
        p.apply(&checked(&mut feed, n, gflops, &[]));
    }
    assert_eq!(health(&p, "n4"), Health::Isolated);
    p.apply(&feed.job("a", "j", 8, 32, 4, &[(8, 1.0e15), (32, 4.0e15)]));
    assert_eq!(nodes_of(&p, "j"), ["n1", "n2", "n3"]);
}

/// Five nodes and one spare: the job runs on four; a loss takes the spare.
fn with_a_spare() -> (Planner, Feed) {
    let config = PlannerConfig {
        spares: 1,
        ..PlannerConfig::default()
    };
    let (mut p, mut feed) = (with(config), Feed::new());
    for n in 1..=5 {
        p.apply(&feed.node_joined("a", &format!("n{n}")));
    }
    p.apply(&feed.job("a", "j", 8, 40, 5, &[(8, 1.0e15), (40, 5.0e15)]));
    (p, feed)
}

#[test]
fn a_spare_is_kept_idle_and_a_loss_takes_it_at_the_same_size() {
    let (mut p, mut feed) = with_a_spare();
    assert_eq!(
        nodes_of(&p, "j"),
        ["n1", "n2", "n3", "n4"],
        "n5 stays spare"
    );
    let out = p.apply(&feed.failure("a", "n2", FailureKind::EccError));
    assert_eq!(nodes_of(&p, "j"), ["n1", "n3", "n4", "n5"]);
    let start = commands(&out)
        .into_iter()
        .find(|c| c.action == CommandAction::Reconfigure)
        .expect("the job moves onto the spare");
    assert_eq!(start.restore_from.as_deref(), Some("replica:n1"));
    let reason = decision(&out).reason;
    assert!(
        reason.contains("j keeps its size on spare n5 instead of shrinking"),
        "{reason}"
    );
    assert!(reason.contains("spares idle 0 of 1"), "{reason}");

    // Repaired: the node refills the pool instead of growing the job.
    let isolate = commands(&out)[0].clone();
    p.apply(&feed.result(&isolate, CommandStatus::Succeeded));
    let out = p.apply(&feed.node_event("a", "n2", ClusterEventKind::NodeRepaired, "fixed"));
    assert_eq!(nodes_of(&p, "j"), ["n1", "n3", "n4", "n5"]);
    // Kept idle, n2 forgoes what j would do on five nodes instead of four.
    let reason = decision(&out).reason;
    assert!(
        reason.contains("spares idle 1 of 1 (n2), forgoing 1.000e15 FLOP/s of WAF now"),
        "{reason}"
    );
}

#[test]
fn without_spares_a_loss_shrinks_the_job() {
    let (mut p, mut feed) = (planner(planner::PolicyName::Unicron), Feed::new());
    for n in 1..=4 {
        p.apply(&feed.node_joined("a", &format!("n{n}")));
    }
    p.apply(&feed.job("a", "j", 8, 40, 4, &[(8, 1.0e15), (40, 5.0e15)]));
    assert_eq!(nodes_of(&p, "j").len(), 4);
    p.apply(&feed.failure("a", "n2", FailureKind::EccError));
    assert_eq!(nodes_of(&p, "j"), ["n1", "n3", "n4"]);
}

fn straggler(feed: &mut Feed, node: &str, slowdown: f64) -> Input {
    let time_ms = feed.tick(10);
    let mut f = testing::failure(
        format!("s-{}", feed.offset + 1),
        "a",
        node,
        FailureKind::Straggler,
        time_ms - 500,
        time_ms,
    );
    f.job = Some("j".into());
    f.slowdown = Some(slowdown);
    feed.input("unicron.failures", InputEvent::Failure(f))
}

#[test]
fn a_straggler_is_swapped_for_a_spare_when_the_gain_outweighs_the_move() {
    let (mut p, mut feed) = with_a_spare();
    let out = p.apply(&straggler(&mut feed, "n3", 1.3));
    let reason = decision(&out).reason;
    assert!(
        reason.contains("n3 computes 1.30× its peers' median"),
        "{reason}"
    );
    assert!(reason.contains("replace it"), "{reason}");
    assert_eq!(
        actions(&out)[0],
        (CommandAction::IsolateNode, vec!["n3".into()])
    );
    assert_eq!(nodes_of(&p, "j"), ["n1", "n2", "n4", "n5"]);
    assert_eq!(health(&p, "n3"), Health::Isolated);
}

#[test]
fn a_straggler_stays_when_replacing_it_does_not_pay() {
    // A re-plan expected within 15 min: a 10-min move cannot win back 2%.
    let config = PlannerConfig {
        spares: 1,
        default_running_s: 900.0,
        ..PlannerConfig::default()
    };
    let (mut p, mut feed) = (with(config), Feed::new());
    for n in 1..=5 {
        p.apply(&feed.node_joined("a", &format!("n{n}")));
    }
    p.apply(&feed.job("a", "j", 8, 40, 5, &[(8, 1.0e15), (40, 5.0e15)]));
    let out = p.apply(&straggler(&mut feed, "n3", 1.02));
    let reason = decision(&out).reason;
    assert!(
        reason.contains("keep it, replacing does not pay"),
        "{reason}"
    );
    assert!(commands(&out).is_empty());
    assert_eq!(nodes_of(&p, "j"), ["n1", "n2", "n3", "n4"]);
}

#[test]
fn an_isolation_answered_after_the_repair_leaves_the_node_to_its_check() {
    let (mut p, mut feed) = checked_pool(&["n1", "n2", "n3"]);
    let isolate = commands(&p.apply(&feed.failure("a", "n2", FailureKind::EccError)))[0].clone();
    // Its agent was down: the repair comes before the isolation's answer.
    p.apply(&feed.node_event("a", "n2", ClusterEventKind::NodeRepaired, "fixed"));
    p.apply(&feed.result(&isolate, CommandStatus::Succeeded));
    assert_eq!(health(&p, "n2"), Health::Checking);
    p.apply(&checked(&mut feed, "n2", 100.0, &[]));
    assert_eq!(health(&p, "n2"), Health::Healthy);
}
