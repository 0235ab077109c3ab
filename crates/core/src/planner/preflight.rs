//! Pre-flight checks (`planner.preflight`): a node that joins or comes
//! back from repair is out of plans until its agent's check passes. The
//! verdict is taken here, from the figures the agent reported, so replay
//! reaches the same one: a failed part fails the node; a figure far below
//! the pool's median marks it slow, which keeps it out too.

use crate::records::{CommandAction, NodeCheck, Severity};

use super::config::PlannerConfig;
use super::replan::Action;
use super::state::{CheckFigures, ClusterState, Health};

/// Where a node stands after its check.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Verdict {
    Pass(CheckFigures),
    /// Failed or slow: why, in one line.
    Out(String),
}

/// Reads one figure of a check.
type Figure = fn(&CheckFigures) -> Option<f64>;

/// Puts `node` in `Checking` and returns the command that checks it: with
/// a peer for the pairwise all-reduce when an idle checked node exists.
pub(super) fn start(state: &mut ClusterState, node: &str) -> Action {
    if let Some(n) = state.nodes.get_mut(node) {
        n.health = Health::Checking;
    }
    let peer = state
        .free_nodes()
        .into_iter()
        .find(|p| p != node && state.nodes.get(p).is_some_and(|n| n.checked.is_some()));
    let mut nodes = vec![node.to_string()];
    nodes.extend(peer);
    Action {
        action: CommandAction::CheckNode,
        job: None,
        nodes,
        restore_from: None,
        severity: Severity::Unknown,
        node: Some(node.to_string()),
        leaves: None,
    }
}

/// Judges `check` of `node` against the other checked nodes' figures.
pub(super) fn verdict(
    config: &PlannerConfig,
    state: &ClusterState,
    node: &str,
    check: &NodeCheck,
) -> Verdict {
    if !check.failures.is_empty() {
        return Verdict::Out(format!("check failed: {}", check.failures.join("; ")));
    }
    let figures = CheckFigures {
        matmul_gflops: check.matmul_gflops,
        memory_gbps: check.memory_gbps,
        allreduce_gbps: check.allreduce_gbps,
    };
    let parts: [(&str, Figure); 3] = [
        ("matmul GFLOP/s", |f| f.matmul_gflops),
        ("memory GB/s", |f| f.memory_gbps),
        ("all-reduce GB/s", |f| f.allreduce_gbps),
    ];
    let mut slow = Vec::new();
    for (name, get) in parts {
        let Some(mine) = get(&figures) else { continue };
        if !mine.is_finite() || mine < 0.0 {
            return Verdict::Out(format!("check reported {name} {mine}, not a measurement"));
        }
        let mut pool: Vec<f64> = state
            .nodes
            .iter()
            .filter(|(id, n)| id.as_str() != node && n.health != Health::Isolated)
            .filter_map(|(_, n)| n.checked.as_ref().and_then(get))
            .collect();
        // Two others at least, or one odd node sets the bar.
        if pool.len() < 2 {
            continue;
        }
        pool.sort_by(f64::total_cmp);
        let median = pool[pool.len() / 2];
        if mine < config.preflight_slow_share * median {
            slow.push(format!(
                "{name} {mine:.1} is {:.0}% of the pool's median {median:.1}",
                100.0 * mine / median
            ));
        }
    }
    if slow.is_empty() {
        Verdict::Pass(figures)
    } else {
        Verdict::Out(format!(
            "slow (below {:.0}% of the pool): {}",
            100.0 * config.preflight_slow_share,
            slow.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Node;

    fn checked(gflops: f64) -> NodeCheck {
        NodeCheck {
            matmul_gflops: Some(gflops),
            memory_gbps: Some(10.0),
            ..NodeCheck::default()
        }
    }

    fn pool(figures: &[f64]) -> ClusterState {
        let mut state = ClusterState::new("c");
        for (i, g) in figures.iter().enumerate() {
            let mut node = Node::new(8);
            node.checked = Some(CheckFigures {
                matmul_gflops: Some(*g),
                memory_gbps: Some(10.0),
                allreduce_gbps: None,
            });
            state.nodes.insert(format!("n{i}"), node);
        }
        state
    }

    #[test]
    fn a_node_far_below_the_pools_median_is_slow_and_one_near_it_passes() {
        let config = PlannerConfig::default();
        let state = pool(&[100.0, 110.0, 90.0]);
        let Verdict::Out(why) = verdict(&config, &state, "new", &checked(50.0)) else {
            panic!("half the median passed");
        };
        assert!(
            why.contains("matmul GFLOP/s 50.0 is 50% of the pool's median 100.0"),
            "{why}"
        );
        assert!(matches!(
            verdict(&config, &state, "new", &checked(80.0)),
            Verdict::Pass(_)
        ));
    }

    #[test]
    fn a_failed_part_fails_and_a_small_pool_judges_no_speed() {
        let config = PlannerConfig::default();
        let mut check = checked(1.0);
        assert!(matches!(
            verdict(&config, &pool(&[100.0]), "new", &check),
            Verdict::Pass(_)
        ));
        check.failures = vec!["matmul: could not run: torch not importable".into()];
        assert_eq!(
            verdict(&config, &pool(&[100.0]), "new", &check),
            Verdict::Out("check failed: matmul: could not run: torch not importable".into())
        );
    }
}
