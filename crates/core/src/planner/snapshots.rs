//! Where a job's in-memory snapshots are, and the one step a restart
//! resumes from. Agents report every complete snapshot they store (their
//! own ranks' and the replicas they keep for a peer); the planner mirrors
//! what each agent holds with the agent's own eviction rule (the newest
//! [`KEPT`] reported steps per rank; an agent keeps steps it has not yet
//! reported beside them), so the step it picks is one the holders still
//! have. Every rank of the new layout must be able to restore the same
//! step; otherwise the job falls back to its disk checkpoint, and the
//! command says why.

use std::collections::BTreeSet;

use super::state::ClusterState;
use crate::records::{RankSource, SnapshotHeld, SnapshotPeer, SnapshotPlan};

/// Snapshots an agent keeps per rank it holds: the newest and the one
/// before it (a rank killed while saving leaves the one before).
pub const KEPT: usize = 2;

/// Notes snapshots `holder` reports. Reports of a generation older than the
/// job's newest start are ignored: that start chose its step already, and
/// anything later from before it is abandoned work.
pub fn note(state: &mut ClusterState, holder: &str, held: &[SnapshotHeld]) -> usize {
    let mut noted = 0;
    for s in held {
        let Some(job) = state.jobs.get_mut(&s.job) else {
            continue;
        };
        if s.generation < job.generation || s.rank < 0 || s.local_world < 1 {
            continue;
        }
        super::interval::note(
            &mut job.snapshot_costs,
            s.rank,
            s.replica,
            s.block_us,
            s.step_us,
            s.transfer_us,
        );
        let index = &mut job.snapshots;
        index.local_world = s.local_world;
        let steps = index
            .held
            .entry(s.rank)
            .or_default()
            .entry(holder.to_string())
            .or_default();
        if !steps.contains(&s.step) {
            steps.push(s.step);
            steps.sort_unstable();
            if steps.len() > KEPT {
                steps.remove(0);
            }
        }
        noted += 1;
    }
    noted
}

/// Forgets what `node` held (its agent restarted, or it left the cluster).
pub fn forget_node(state: &mut ClusterState, node: &str) {
    for job in state.jobs.values_mut() {
        for holders in job.snapshots.held.values_mut() {
            holders.remove(node);
        }
        job.snapshots.held.retain(|_, h| !h.is_empty());
    }
}

/// The restore point of a start of `job` on `nodes` (rank order), and the
/// replica holder of each node. Steps after the chosen one are dropped
/// (the job resumes before them, and agents drop them too); with no step,
/// every snapshot of the job is dropped.
pub fn plan(state: &mut ClusterState, job: &str, nodes: &[String]) -> SnapshotPlan {
    let address = |state: &ClusterState, node: &str| {
        state
            .nodes
            .get(node)
            .filter(|n| n.health.schedulable())
            .and_then(|n| n.snapshot_address.clone())
    };
    let replica_holders: Vec<String> = if nodes.len() < 2 {
        vec![String::new(); nodes.len()]
    } else {
        (0..nodes.len())
            .map(|i| {
                let next = &nodes[(i + 1) % nodes.len()];
                match (address(state, &nodes[i]), address(state, next)) {
                    (Some(_), Some(_)) => next.clone(),
                    _ => String::new(),
                }
            })
            .collect()
    };
    let chosen = choose(state, job, nodes);
    let (step, reason, sources) = match chosen {
        Ok((step, sources)) => (
            Some(step),
            format!(
                "step {step}: the newest every rank can restore ({})",
                summary(&sources, nodes, local_world(state, job))
            ),
            sources,
        ),
        Err(why) => (None, why, Vec::new()),
    };
    let named: BTreeSet<&str> = sources
        .iter()
        .map(|s| s.node.as_str())
        .chain(replica_holders.iter().map(String::as_str))
        .chain(nodes.iter().map(String::as_str))
        .filter(|n| !n.is_empty())
        .collect();
    let peers = named
        .into_iter()
        .filter_map(|n| {
            Some(SnapshotPeer {
                node: n.to_string(),
                address: address(state, n)?,
            })
        })
        .collect();
    if let Some(j) = state.jobs.get_mut(job) {
        match step {
            Some(step) => {
                for holders in j.snapshots.held.values_mut() {
                    for steps in holders.values_mut() {
                        steps.retain(|s| *s <= step);
                    }
                    holders.retain(|_, steps| !steps.is_empty());
                }
                j.snapshots.held.retain(|_, h| !h.is_empty());
            }
            None => j.snapshots.held.clear(),
        }
    }
    SnapshotPlan {
        step,
        reason,
        sources,
        replica_holders,
        peers,
        interval_steps: 1,
        interval_reason: String::new(),
    }
}

fn local_world(state: &ClusterState, job: &str) -> i32 {
    state.jobs.get(job).map_or(0, |j| j.snapshots.local_world)
}

/// "2 from memory, 1 from replicas".
fn summary(sources: &[RankSource], nodes: &[String], local_world: i32) -> String {
    let local = sources
        .iter()
        .filter(|s| runs_on(nodes, local_world, s.rank) == Some(s.node.as_str()))
        .count();
    format!("{local} from memory, {} from a peer", sources.len() - local)
}

/// The node that runs `rank` in a layout of `nodes` with `local_world`
/// ranks per node.
fn runs_on(nodes: &[String], local_world: i32, rank: i32) -> Option<&str> {
    let index = usize::try_from(rank / local_world.max(1)).ok()?;
    nodes.get(index).map(String::as_str)
}

/// The newest step every rank of the new layout can restore, with each
/// rank's source; or why there is none.
fn choose(
    state: &ClusterState,
    job: &str,
    nodes: &[String],
) -> Result<(i64, Vec<RankSource>), String> {
    let entry = state.jobs.get(job);
    if entry.is_some_and(|j| j.generation == 0) {
        return Err("nothing (a first start)".into());
    }
    let index = entry
        .map(|j| &j.snapshots)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| "disk checkpoint: no in-memory snapshots reported".to_string())?;
    let usable = |holder: &str, runs_here: &str| {
        state.nodes.get(holder).is_some_and(|n| {
            n.health.schedulable() && (holder == runs_here || n.snapshot_address.is_some())
        })
    };
    let old_world = index.held.keys().next_back().map_or(0, |r| r + 1);
    let new_world = nodes.len() as i32 * index.local_world;
    if new_world == 0 || old_world == 0 {
        return Err("disk checkpoint: no ranks to restore".into());
    }
    // Steps each needed old rank can be restored at, from anywhere usable.
    let mut common: Option<BTreeSet<i64>> = None;
    for rank in 0..new_world {
        let from = rank % old_world;
        let here = runs_on(nodes, index.local_world, rank).unwrap_or_default();
        let steps: BTreeSet<i64> = index
            .held
            .get(&from)
            .into_iter()
            .flatten()
            .filter(|(holder, _)| usable(holder, here))
            .flat_map(|(_, steps)| steps.iter().copied())
            .collect();
        if steps.is_empty() {
            return Err(format!(
                "disk checkpoint: no live node holds a snapshot of rank {from}"
            ));
        }
        common = Some(match common {
            None => steps,
            Some(c) => c.intersection(&steps).copied().collect(),
        });
    }
    let step = common
        .and_then(|c| c.last().copied())
        .ok_or_else(|| "disk checkpoint: the ranks' snapshots share no step".to_string())?;
    let sources = (0..new_world)
        .map(|rank| {
            let from = rank % old_world;
            let here = runs_on(nodes, index.local_world, rank).unwrap_or_default();
            let holders = &index.held[&from];
            let has = |h: &str| holders.get(h).is_some_and(|s| s.contains(&step));
            // This node's own memory first, then the first peer by name.
            let node = if has(here) {
                here.to_string()
            } else {
                holders
                    .iter()
                    .find(|(h, s)| s.contains(&step) && usable(h, here))
                    .map(|(h, _)| h.clone())
                    .expect("every rank has a usable holder at the common step")
            };
            RankSource {
                rank,
                from_rank: from,
                node,
            }
        })
        .collect();
    Ok((step, sources))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::state::{Health, Job, JobSnapshots, JobStatus, Node};
    use crate::records::JobSpec;

    fn state() -> ClusterState {
        let mut state = ClusterState::new("c");
        for n in ["n1", "n2", "n3"] {
            state.nodes.insert(
                n.into(),
                Node {
                    snapshot_address: Some(format!("{n}:7000")),
                    ..Node::new(8)
                },
            );
        }
        state.jobs.insert(
            "j".into(),
            Job {
                spec: JobSpec {
                    weight: 1.0,
                    min_gpus: 8,
                    max_gpus: 16,
                    unit_gpus: 8,
                    dp_degree: 2,
                    checkpoint_interval_s: 60,
                    throughput: Vec::new(),
                },
                status: JobStatus::Running,
                nodes: vec!["n1".into(), "n2".into()],
                peak_gpus: 16,
                launch: None,
                generation: 1,
                restarts: 0,
                snapshots: JobSnapshots::default(),
                snapshot_costs: Default::default(),
                restore_costs: std::collections::BTreeMap::new(),
                failure_starts: Default::default(),
            },
        );
        state
    }

    fn held(rank: i32, step: i64, replica: bool) -> SnapshotHeld {
        SnapshotHeld {
            job: "j".into(),
            rank,
            step,
            generation: 1,
            local_world: 1,
            bytes: 100,
            replica,
            block_us: 0,
            step_us: 0,
            transfer_us: 0,
        }
    }

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn the_newest_step_every_rank_holds_and_each_ranks_nearest_source() {
        let mut s = state();
        // Rank 0 on n1 saved 5..=7 (5 evicted); rank 1 on n2 got to 6 only
        // (killed while saving 7). Replicas: n1's on n2, n2's on n1.
        for step in 5..=7 {
            note(&mut s, "n1", &[held(0, step, false)]);
            note(&mut s, "n2", &[held(0, step, true)]);
        }
        for step in 5..=6 {
            note(&mut s, "n2", &[held(1, step, false)]);
            note(&mut s, "n1", &[held(1, step, true)]);
        }
        let chosen = super::plan(&mut s, "j", &nodes(&["n1", "n2"]));
        assert_eq!(chosen.step, Some(6), "{}", chosen.reason);
        assert_eq!(
            chosen.sources,
            vec![
                RankSource {
                    rank: 0,
                    from_rank: 0,
                    node: "n1".into()
                },
                RankSource {
                    rank: 1,
                    from_rank: 1,
                    node: "n2".into()
                },
            ]
        );
        assert_eq!(chosen.replica_holders, nodes(&["n2", "n1"]));
        // Step 7 is abandoned work: forgotten with the choice.
        let steps = &s.jobs["j"].snapshots.held[&0]["n1"];
        assert_eq!(steps, &vec![6]);
    }

    #[test]
    fn a_lost_node_s_ranks_come_from_their_replica_and_else_the_checkpoint() {
        let mut s = state();
        for step in [3, 4] {
            note(&mut s, "n1", &[held(0, step, false), held(1, step, true)]);
            note(&mut s, "n2", &[held(1, step, false), held(0, step, true)]);
        }
        s.nodes.get_mut("n2").unwrap().health = Health::Isolated;
        let mut lost = s.clone();
        let chosen = super::plan(&mut lost, "j", &nodes(&["n1", "n3"]));
        assert_eq!(chosen.step, Some(4), "{}", chosen.reason);
        assert_eq!(
            chosen.sources[1].node, "n1",
            "rank 1 from its replica on n1"
        );
        assert!(
            chosen
                .peers
                .iter()
                .any(|p| p.node == "n1" && p.address == "n1:7000")
        );
        // n1's agent restarted too: nothing of rank 1 is left anywhere.
        forget_node(&mut s, "n1");
        let chosen = super::plan(&mut s, "j", &nodes(&["n1", "n3"]));
        assert_eq!(chosen.step, None);
        assert!(
            chosen.reason.contains("rank 0") || chosen.reason.contains("rank 1"),
            "{}",
            chosen.reason
        );
        assert!(
            s.jobs["j"].snapshots.is_empty(),
            "a checkpoint restart forgets them"
        );
    }

    #[test]
    fn reports_from_before_the_newest_start_are_ignored() {
        let mut s = state();
        s.jobs.get_mut("j").unwrap().generation = 2;
        assert_eq!(note(&mut s, "n1", &[held(0, 9, false)]), 0);
        assert!(s.jobs["j"].snapshots.is_empty());
    }

    #[test]
    fn a_smaller_layout_takes_the_ranks_it_needs() {
        let mut s = state();
        note(&mut s, "n1", &[held(0, 8, false), held(1, 8, true)]);
        note(&mut s, "n2", &[held(1, 8, false)]);
        let chosen = super::plan(&mut s, "j", &nodes(&["n2"]));
        assert_eq!(chosen.step, Some(8));
        assert_eq!(
            chosen.sources,
            vec![RankSource {
                rank: 0,
                from_rank: 0,
                node: "n1".into()
            }]
        );
        assert_eq!(chosen.replica_holders, vec![String::new()]);
    }
}
