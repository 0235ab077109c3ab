//! The shadow planner: recorded decisions applied, in order, on the inputs
//! they name, as a planner catching up does it (see [`CatchUp`]).

use std::collections::{BTreeMap, VecDeque};

use super::waf::{FailureMark, WafPoint, chosen_waf, cluster_waf};
use crate::planner::{ClusterState, Input, InputEvent, Planner, PlannerConfig};
use crate::records::{Decision, FailureEvent};
use crate::replay::CatchUp;
use crate::signing::CommandSigner;

/// WAF points and failure marks kept per cluster.
pub const SERIES: usize = 2000;
/// Planner inputs kept while no decision has named them yet.
pub const PENDING_INPUTS: usize = 20_000;
/// Decisions a cluster may queue behind one missing trigger before it is skipped.
pub const MAX_WAITING: usize = 256;

/// Where an input was read: topic, partition, offset.
type Position = (String, i32, i64);

/// What the page keeps of one cluster besides the planner's state.
#[derive(Debug, Default)]
pub(super) struct ClusterLog {
    /// Decisions read before their trigger, in the order they were taken.
    waiting: VecDeque<Decision>,
    pub(super) series: VecDeque<WafPoint>,
    pub(super) failures: VecDeque<FailureMark>,
    /// Decisions applied to the shadow planner, and those it did not reproduce.
    pub(super) caught_up: CatchUp,
    /// Decisions dropped because their trigger never came.
    pub(super) skipped: u64,
}

/// A planner rebuilt from the decisions of every planner instance.
pub(super) struct Shadow {
    planner: Planner,
    node_gpus: u32,
    inputs: BTreeMap<Position, InputEvent>,
    input_order: VecDeque<Position>,
    clusters: BTreeMap<String, ClusterLog>,
}

impl Shadow {
    pub(super) fn new(config: PlannerConfig) -> Shadow {
        let node_gpus = config.node_gpus.max(1);
        // Commands the shadow planner signs are thrown away; any key will do.
        let signer = CommandSigner::from_seed("status-page", [0; 32]);
        Shadow {
            planner: Planner::new(config, signer),
            node_gpus,
            inputs: BTreeMap::new(),
            input_order: VecDeque::new(),
            clusters: BTreeMap::new(),
        }
    }

    /// The planner's state of one cluster.
    pub(super) fn state(&self, cluster: &str) -> Option<&ClusterState> {
        self.planner.cluster(cluster)
    }

    /// GPUs a node is counted with when a job's share is shown.
    pub(super) fn node_gpus(&self) -> u32 {
        self.node_gpus
    }

    /// Every cluster seen, by id.
    pub(super) fn logs(&self) -> &BTreeMap<String, ClusterLog> {
        &self.clusters
    }

    /// Puts a failure on its cluster's chart.
    pub(super) fn mark_failure(&mut self, f: &FailureEvent) {
        let log = self.clusters.entry(f.cluster.clone()).or_default();
        log.failures.push_back(FailureMark {
            time_ms: f.detected_ms,
            id: f.id.clone(),
            kind: f.kind.symbol().to_string(),
            severity: f.severity.symbol().to_string(),
        });
        if log.failures.len() > SERIES {
            log.failures.pop_front();
        }
    }

    /// Keeps an input until a decision names it, and applies the decisions
    /// that were waiting for it.
    pub(super) fn take_input(&mut self, position: Position, event: InputEvent) {
        let cluster = event.cluster().to_string();
        if self.inputs.insert(position.clone(), event).is_none() {
            self.input_order.push_back(position);
        }
        while self.inputs.len() > PENDING_INPUTS {
            match self.input_order.pop_front() {
                Some(old) => {
                    self.inputs.remove(&old);
                }
                None => break,
            }
        }
        self.drain(&cluster);
    }

    /// Queues a decision behind its cluster's earlier ones and applies what
    /// can be applied; past [`MAX_WAITING`] the oldest is skipped.
    pub(super) fn take_decision(&mut self, decision: Decision) {
        let cluster = decision.cluster.clone();
        let log = self.clusters.entry(cluster.clone()).or_default();
        log.waiting.push_back(decision);
        if log.waiting.len() > MAX_WAITING {
            log.waiting.pop_front();
            log.skipped += 1;
        }
        self.drain(&cluster);
    }

    /// Applies the cluster's waiting decisions whose triggers have been read.
    fn drain(&mut self, cluster: &str) {
        let Some(log) = self.clusters.get_mut(cluster) else {
            return;
        };
        while let Some(decision) = log.waiting.front() {
            let t = &decision.trigger;
            let position = (t.topic.clone(), t.partition, t.offset);
            let Some(event) = self.inputs.remove(&position) else {
                return;
            };
            let decision = log.waiting.pop_front().expect("front exists");
            let (topic, partition, offset) = position;
            let input = Input {
                topic,
                partition,
                offset,
                event,
            };
            log.caught_up.step(&mut self.planner, &input, &decision);
            if let Some(state) = self.planner.cluster(cluster) {
                let (effective, ideal) = cluster_waf(state, self.node_gpus);
                log.series.push_back(WafPoint {
                    // Input times are not monotone (a late result); the
                    // cluster's watermark is, and charts need that.
                    time_ms: state.watermark_ms,
                    effective,
                    planned: chosen_waf(&decision),
                    ideal,
                });
                if log.series.len() > SERIES {
                    log.series.pop_front();
                }
            }
        }
    }
}
