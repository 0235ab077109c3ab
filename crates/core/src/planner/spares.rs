//! Hot spares: checked nodes the Unicron policy keeps idle, so a job that
//! loses a node takes one and keeps its size instead of shrinking.
//!
//! The spares are not named: the re-plan sees `spares` nodes fewer than
//! are schedulable, less those already owed to running jobs (their peak
//! size). A loss lowers what is owed to nobody, so the job that lost a
//! node can take a free one back at once; a repaired node raises the
//! reserve again, and it stays idle: the pool refills.

use std::collections::{BTreeMap, BTreeSet};

use super::config::PlannerConfig;
use super::state::{ClusterState, JobStatus};

/// Nodes the re-plan must leave idle now.
pub(super) fn reserve(config: &PlannerConfig, state: &ClusterState) -> u32 {
    if config.spares == 0 {
        return 0;
    }
    let unit = config.node_gpus.max(1);
    let schedulable = state.schedulable_nodes().len() as u32;
    let owed: u32 = state
        .jobs
        .values()
        .filter(|j| j.status == JobStatus::Running)
        .map(|j| j.peak_gpus.div_ceil(unit))
        .sum();
    config.spares.min(schedulable.saturating_sub(owed))
}

/// What a re-plan did with the spares, for its decision's reason: which
/// hit job took which idle node instead of shrinking, what is left idle,
/// and the WAF keeping them idle forgoes now (`forgone`, FLOP/s).
pub(super) fn note(
    config: &PlannerConfig,
    idle_before: &[String],
    hit: &BTreeSet<String>,
    assignment: &BTreeMap<String, Vec<String>>,
    idle_after: &[String],
    forgone: Option<f64>,
) -> Option<String> {
    if config.spares == 0 {
        return None;
    }
    let mut parts: Vec<String> = hit
        .iter()
        .filter_map(|job| {
            let taken: Vec<&str> = assignment
                .get(job)?
                .iter()
                .filter(|n| idle_before.contains(n))
                .map(String::as_str)
                .collect();
            (!taken.is_empty()).then(|| {
                format!(
                    "{job} keeps its size on spare {} instead of shrinking",
                    taken.join(", ")
                )
            })
        })
        .collect();
    parts.push(format!(
        "spares idle {} of {}{}{}",
        idle_after.len(),
        config.spares,
        if idle_after.is_empty() {
            String::new()
        } else {
            format!(" ({})", idle_after.join(", "))
        },
        match forgone {
            Some(waf) if waf > 0.0 => format!(", forgoing {waf:.3e} FLOP/s of WAF now"),
            Some(_) => ", forgoing nothing now (no job would grow)".to_string(),
            None => String::new(),
        }
    ));
    Some(parts.join("; "))
}
