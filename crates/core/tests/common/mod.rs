//! Helpers shared by the planner and status-view tests: a feed of inputs
//! with increasing offsets and event times.
#![allow(dead_code)]

use unicron_core::planner::{Input, InputEvent, Output, Planner, PlannerConfig, PolicyName};
use unicron_core::signing::CommandSigner;
use unicron_core::*;

pub struct Feed {
    pub offset: i64,
    pub time_ms: i64,
}

impl Feed {
    pub fn new() -> Feed {
        Feed {
            offset: 0,
            time_ms: 1_764_000_000_000,
        }
    }

    pub fn input(&mut self, topic: &str, event: InputEvent) -> Input {
        self.offset += 1;
        Input {
            topic: topic.into(),
            partition: 0,
            offset: self.offset,
            event,
        }
    }

    pub fn tick(&mut self, seconds: i64) -> i64 {
        self.time_ms += seconds * 1000;
        self.time_ms
    }

    pub fn node_joined(&mut self, cluster: &str, node: &str) -> Input {
        let time_ms = self.tick(1);
        self.input(
            "unicron.cluster",
            InputEvent::Cluster(unicron_core::testing::node_joined(
                cluster, node, 8, time_ms,
            )),
        )
    }

    /// A node event of `kind`, as a scheduler's poller sends it.
    pub fn node_event(
        &mut self,
        cluster: &str,
        node: &str,
        kind: ClusterEventKind,
        reason: &str,
    ) -> Input {
        let mut event = ClusterEvent::new(cluster, self.tick(1), kind);
        event.node = Some(node.into());
        event.reason = Some(reason.into());
        self.input("unicron.cluster", InputEvent::Cluster(event))
    }

    pub fn job(
        &mut self,
        cluster: &str,
        id: &str,
        min: i32,
        max: i32,
        dp: i32,
        points: &[(i32, f64)],
    ) -> Input {
        let time_ms = self.tick(1);
        self.input(
            "unicron.cluster",
            InputEvent::Cluster(ClusterEvent {
                cluster: cluster.into(),
                time_ms,
                kind: ClusterEventKind::JobSubmitted,
                node: None,
                gpus: None,
                job_id: Some(id.into()),
                job: Some(JobSpec {
                    weight: 1.0,
                    min_gpus: min,
                    max_gpus: max,
                    unit_gpus: 8,
                    dp_degree: dp,
                    checkpoint_interval_s: 1800,
                    throughput: points
                        .iter()
                        .map(|&(gpus, flops)| ThroughputPoint { gpus, flops })
                        .collect(),
                }),
                address: None,
                launch: None,
                snapshot_address: None,
                snapshots: Vec::new(),
                restored: None,
                check: None,
                reason: None,
            }),
        )
    }

    pub fn failure(&mut self, cluster: &str, node: &str, kind: FailureKind) -> Input {
        let time_ms = self.tick(10);
        let id = format!("f-{}", self.offset + 1);
        self.input(
            "unicron.failures",
            InputEvent::Failure(unicron_core::testing::failure(
                id,
                cluster,
                node,
                kind,
                time_ms - 500,
                time_ms,
            )),
        )
    }

    pub fn result(&mut self, command: &Command, status: CommandStatus) -> Input {
        let time_ms = self.tick(5);
        self.input(
            "unicron.command-results",
            InputEvent::Result(CommandResult {
                command_id: command.id.clone(),
                cluster: command.cluster.clone(),
                time_ms,
                status,
                reason: (status == CommandStatus::Failed).then(|| "backend said no".into()),
                duration_ms: 4000,
                executor: "e1".into(),
                node: None,
            }),
        )
    }
}

pub fn planner(policy: PolicyName) -> Planner {
    let config = PlannerConfig {
        policy,
        ..PlannerConfig::default()
    };
    Planner::new(config, CommandSigner::from_seed("test", [1; 32]))
}

pub fn commands(outputs: &[Output]) -> Vec<Command> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Command(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

pub fn decision(outputs: &[Output]) -> Decision {
    match &outputs[0] {
        Output::Decision(d) => d.clone(),
        other => panic!("first output is {other:?}"),
    }
}
