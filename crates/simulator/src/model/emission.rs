//! What the cluster reports: node joins and job submissions at the start,
//! process exits, heartbeats, DCGM telemetry and log noise with every
//! record, and with a sparse feed the few signals a failure makes matter.

use std::collections::BTreeMap;

use rand::Rng;
use unicron_core::{
    AgentEvent, AgentEventKind, ClusterEvent, ClusterEventKind, FailureKind, LogRecord,
    MetricSample, TelemetryBatch,
};

use super::{Emission, NodeState, Phase, Sim, TICK_MS};
use crate::faults;

/// Iterations a sparse feed reports for a job that hangs (each for every
/// rank): enough for the detector to trust its mean
/// (`hang_min_iterations`, 5 by default).
const SPARSE_ITERATIONS: u64 = 8;

/// A gauge's base value and the spread of its noise.
type Level = (f64, f64);

/// DCGM gauges per GPU: (name, (base, spread) when busy, (base, spread)
/// when idle). Temperatures stay below the detector's 90 °C thermal rule.
const GAUGES: [(&str, Level, Level); 4] = [
    ("DCGM_FI_DEV_GPU_UTIL", (93.0, 6.0), (0.0, 0.0)),
    ("DCGM_FI_DEV_GPU_TEMP", (62.0, 10.0), (35.0, 3.0)),
    ("DCGM_FI_DEV_POWER_USAGE", (350.0, 50.0), (60.0, 5.0)),
    ("DCGM_FI_DEV_FB_USED", (71_000.0, 1_000.0), (0.0, 0.0)),
];

impl Sim {
    /// A node's cluster event, now.
    pub(super) fn node_event(&self, kind: ClusterEventKind, node: &str) -> Emission {
        let mut event = ClusterEvent::new(self.config.cluster.clone(), self.now, kind);
        event.node = Some(node.to_string());
        event.gpus = Some(self.config.gpus_per_node as i32);
        Emission::Cluster(event)
    }

    /// Node joins and job submissions at the start.
    pub(super) fn announce(&mut self, out: &mut Vec<Emission>) {
        for name in self.nodes.keys() {
            out.push(self.node_event(ClusterEventKind::NodeJoined, name));
        }
        for (id, job) in self.jobs.iter() {
            out.push(Emission::Cluster(ClusterEvent {
                cluster: self.config.cluster.clone(),
                time_ms: self.now,
                kind: ClusterEventKind::JobSubmitted,
                node: None,
                gpus: None,
                job_id: Some(id.to_string()),
                job: Some(job.model.spec(
                    job.weight,
                    job.max_gpus,
                    self.config.gpus_per_node,
                    self.config.checkpoint_interval_s,
                )),
                address: None,
                launch: None,
                reason: None,
                snapshot_address: None,
                snapshots: Vec::new(),
                restored: None,
                check: None,
            }));
        }
    }

    /// A rank's process exit, now: with an exit code, or killed by `signal`.
    pub(super) fn exit(
        &self,
        node: &str,
        job: &str,
        rank: u32,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> Emission {
        Emission::Agent(AgentEvent {
            cluster: self.config.cluster.clone(),
            node: node.to_string(),
            time_ms: self.now,
            kind: AgentEventKind::ProcessExit,
            job: Some(job.to_string()),
            rank: Some(rank as i32),
            exit_code: code,
            signal,
            iteration: None,
            iteration_time_ms: None,
            compute_ms: None,
            idle_tick: false,
            worker: None,
        })
    }

    /// Sparse feed: what the detector would know of node `node` and its
    /// job `job` (positions) just before a failure: the node's heartbeat of
    /// the last tick (it is watched from now on) and, for a hang, the job's
    /// recent iterations.
    pub(super) fn sparse_history(
        &mut self,
        node: usize,
        job: usize,
        kind: FailureKind,
        out: &mut Vec<Emission>,
    ) {
        let job_id = self.jobs.name(job);
        if self.watched.insert(node) {
            let mut beat = AgentEvent::new(
                &self.config.cluster,
                self.nodes.name(node),
                self.now - TICK_MS,
                AgentEventKind::Heartbeat,
            );
            beat.job = Some(job_id.to_string());
            out.push(Emission::Agent(beat));
        }
        let job = &self.jobs[job];
        if !self.stalls(kind) {
            return;
        }
        let Some(at) = job.last_completion_ms else {
            return;
        };
        let gpus = job.nodes.len() as u32 * self.config.gpus_per_node;
        let iteration_ms = job.model.iteration_s(gpus) / self.config.throughput_factor * 1000.0;
        let first = job
            .iteration
            .saturating_sub(job.iterations_seen.min(SPARSE_ITERATIONS));
        // Every rank's, as the ticked feed reports them: the detector
        // counts rank reports, so a job of many nodes is trusted after its
        // first iteration, a one-node job after `hang_min_iterations`.
        for iteration in first + 1..=job.iteration {
            for (rank, node) in job.nodes.iter().enumerate() {
                let mut done = AgentEvent::new(
                    &self.config.cluster,
                    node,
                    at,
                    AgentEventKind::IterationDone,
                );
                done.job = Some(job_id.to_string());
                done.rank = Some(rank as i32);
                done.iteration = Some(iteration as i64);
                done.iteration_time_ms = Some(iteration_ms);
                out.push(Emission::Agent(done));
            }
        }
    }

    /// Sparse feed: heartbeats of the watched nodes; a node whose fault is
    /// cleared leaves the watch (the detector stops its deadline, as for a
    /// departing agent).
    pub(super) fn watched_signals(&mut self, out: &mut Vec<Emission>) {
        let watched: Vec<usize> = self.watched.iter().copied().collect();
        for position in watched {
            let node = &self.nodes[position];
            let kind = if node.fault.is_none() {
                self.watched.remove(&position);
                AgentEventKind::Leaving
            } else if node.is_dark() {
                continue;
            } else {
                AgentEventKind::Heartbeat
            };
            let name = self.nodes.name(position);
            let mut event = AgentEvent::new(&self.config.cluster, name, self.now, kind);
            event.job = node.job.clone();
            out.push(Emission::Agent(event));
        }
    }

    /// Heartbeats, DCGM telemetry and benign log noise of every node.
    pub(super) fn node_signals(&mut self, out: &mut Vec<Emission>) {
        let now = self.now;
        let cluster = self.config.cluster.clone();
        let hb_ms = (self.config.heartbeat_interval_s * 1000.0) as i64;
        let telemetry_ms = (self.config.telemetry_interval_s * 1000.0) as i64;
        let noise_ms = self.config.noise_interval_s * 1000.0;
        for (name, node) in self.nodes.iter_mut() {
            if node.is_dark() {
                continue;
            }
            let running = node
                .job
                .as_ref()
                .and_then(|j| self.jobs.get(j))
                .filter(|j| j.phase == Phase::Running);
            if node.next_heartbeat <= now {
                node.next_heartbeat += hb_ms.max(TICK_MS);
                out.push(Emission::Agent(AgentEvent {
                    cluster: cluster.clone(),
                    node: name.to_string(),
                    time_ms: now,
                    kind: AgentEventKind::Heartbeat,
                    job: node.job.clone(),
                    rank: None,
                    exit_code: None,
                    signal: None,
                    iteration: None,
                    iteration_time_ms: None,
                    compute_ms: None,
                    idle_tick: false,
                    worker: None,
                }));
            }
            if matches!(node.state, NodeState::Isolated { .. }) {
                continue;
            }
            if node.next_telemetry <= now {
                node.next_telemetry += telemetry_ms.max(TICK_MS);
                let busy = running.is_some();
                let mut samples = Vec::with_capacity(node.ecc_dbe.len() * 5 + 1);
                for (gpu, dbe) in node.ecc_dbe.iter().enumerate() {
                    let noise = self.rng.random::<f64>();
                    let gauge = |metric: &str, value: f64| MetricSample {
                        name: metric.into(),
                        value,
                        time_ms: now,
                        gpu: Some(gpu as i32),
                        job: node.job.clone(),
                        rank: None,
                        labels: BTreeMap::from([("Hostname".to_string(), name.to_string())]),
                    };
                    for (metric, (busy_base, busy_span), (idle_base, idle_span)) in GAUGES {
                        let (base, span) = if busy {
                            (busy_base, busy_span)
                        } else {
                            (idle_base, idle_span)
                        };
                        samples.push(gauge(metric, base + span * noise));
                    }
                    samples.push(gauge("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", *dbe));
                }
                if let Some(job) = running {
                    let rank = job.nodes.iter().position(|n| n == name).unwrap_or(0);
                    samples.push(MetricSample {
                        name: "training_iteration_time_ms".into(),
                        value: job
                            .model
                            .iteration_s(job.nodes.len() as u32 * node.ecc_dbe.len() as u32)
                            * 1000.0,
                        time_ms: now,
                        gpu: None,
                        job: node.job.clone(),
                        rank: Some(rank as i32),
                        labels: BTreeMap::new(),
                    });
                }
                out.push(Emission::Telemetry(TelemetryBatch {
                    cluster: cluster.clone(),
                    node: name.to_string(),
                    source: "dcgm-exporter".into(),
                    samples,
                }));
            }
            if node.next_noise <= now {
                node.next_noise += faults::exponential_ms(&mut self.rng, noise_ms).max(TICK_MS);
                let line = faults::NOISE[self.rng.random_range(0..faults::NOISE.len())];
                out.push(Emission::Log(LogRecord {
                    cluster: cluster.clone(),
                    node: name.to_string(),
                    time_ms: now,
                    source: "syslog".into(),
                    job: node.job.clone(),
                    rank: None,
                    gpu: None,
                    line: line.to_string(),
                    attributes: BTreeMap::new(),
                }));
            }
        }
    }
}
