//! What the agent publishes, and the one task that sends it. Telemetry
//! never waits for Kafka: records queue up to a bound, beyond which new
//! ones are dropped and counted, so the workers and the command loop go on
//! while the broker is away.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{Semaphore, mpsc};
use unicron_bus::Producer;
use unicron_codec::{AvroCodec, KafkaConfig, Topic, Topics};
use unicron_core::{
    AgentEvent, AgentEventKind, ClusterEvent, ClusterEventKind, LogRecord, WorkerReport,
};

use crate::metrics::RECORDS_DROPPED;
use crate::settings::AgentSettings;

/// Sends in flight at once; with the queue they bound what a broker
/// outage can hold in memory.
const IN_FLIGHT: usize = 1024;

/// One record for the bus.
#[derive(Debug, Clone)]
pub enum Reported {
    Log(LogRecord),
    Agent(AgentEvent),
    Cluster(ClusterEvent),
}

/// Event time on this node, ms since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The handle every part of the agent reports through.
#[derive(Debug)]
pub struct Reporter {
    cluster: String,
    node: String,
    queue: mpsc::Sender<Reported>,
    dropped: AtomicU64,
}

impl Reporter {
    /// A reporter and the receiving end for [`send_all`].
    pub fn new(settings: &AgentSettings) -> (Arc<Reporter>, mpsc::Receiver<Reported>) {
        let (queue, receiver) = mpsc::channel(settings.buffer_records);
        let reporter = Reporter {
            cluster: settings.cluster.clone(),
            node: settings.node.clone(),
            queue,
            dropped: AtomicU64::new(0),
        };
        (Arc::new(reporter), receiver)
    }

    /// Queues `record`, or drops and counts it when the queue is full.
    pub fn send(&self, record: Reported) {
        if self.queue.try_send(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            ::metrics::counter!(RECORDS_DROPPED.name).increment(1);
        }
    }

    /// Records dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// An agent event of this node, now.
    pub fn event(&self, kind: AgentEventKind, job: Option<&str>, rank: Option<i32>) -> AgentEvent {
        AgentEvent {
            job: job.map(str::to_string),
            rank,
            ..AgentEvent::new(&self.cluster, &self.node, now_ms(), kind)
        }
    }

    /// A worker report (kind `Unknown` unless it is an exit).
    pub fn worker(&self, job: &str, rank: i32, report: WorkerReport) {
        let mut event = self.event(AgentEventKind::Unknown, Some(job), Some(rank));
        event.worker = Some(report);
        self.send(Reported::Agent(event));
    }

    /// A line of this node's output.
    pub fn log(
        &self,
        source: &str,
        job: Option<&str>,
        rank: Option<i32>,
        line: String,
        attributes: BTreeMap<String, String>,
    ) {
        self.send(Reported::Log(LogRecord {
            cluster: self.cluster.clone(),
            node: self.node.clone(),
            time_ms: now_ms(),
            source: source.to_string(),
            job: job.map(str::to_string),
            rank,
            gpu: None,
            line,
            attributes,
        }));
    }

    /// A cluster event about this node or one of its jobs.
    pub fn cluster_event(&self, kind: ClusterEventKind) -> ClusterEvent {
        ClusterEvent::new(self.cluster.clone(), now_ms(), kind)
    }

    /// Announces the node and the jobs it may run (no command lines).
    pub fn announce(&self, settings: &AgentSettings, snapshot_address: Option<String>) {
        let mut joined = self.cluster_event(ClusterEventKind::NodeJoined);
        joined.node = Some(self.node.clone());
        joined.gpus = Some(settings.gpus as i32);
        joined.address = Some(settings.address());
        joined.snapshot_address = snapshot_address;
        self.send(Reported::Cluster(joined));
        for job in &settings.jobs {
            let mut submitted = self.cluster_event(ClusterEventKind::JobSubmitted);
            submitted.job_id = Some(job.id.clone());
            submitted.job = Some(job.spec(settings.gpus));
            submitted.launch = Some(job.launch());
            self.send(Reported::Cluster(submitted));
        }
    }
}

/// Sends queued records until every [`Reporter`] is gone, keyed by node
/// (cluster events by cluster, like every producer of that topic), to
/// `cluster`'s own topics when it has them.
pub async fn send_all(
    kafka: &KafkaConfig,
    cluster: &str,
    producer: Arc<Producer>,
    mut queue: mpsc::Receiver<Reported>,
) {
    let topics = Topics::bound(kafka, cluster);
    let name = |topic| Arc::<str>::from(topics.name(topic));
    let (logs, agent, cluster) = (name(Topic::Logs), name(Topic::Agent), name(Topic::Cluster));
    let (log_codec, agent_codec, cluster_codec) = (
        AvroCodec::<LogRecord>::default(),
        AvroCodec::<AgentEvent>::default(),
        AvroCodec::<ClusterEvent>::default(),
    );
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(record) = queue.recv().await {
        let encoded = match &record {
            Reported::Log(r) => log_codec
                .encode(r)
                .map(|p| (logs.clone(), topics.key_str(Topic::Logs, &r.node), p)),
            Reported::Agent(e) => agent_codec
                .encode(e)
                .map(|p| (agent.clone(), topics.key_str(Topic::Agent, &e.node), p)),
            Reported::Cluster(e) => cluster_codec.encode(e).map(|p| {
                (
                    cluster.clone(),
                    topics.key_str(Topic::Cluster, &e.cluster),
                    p,
                )
            }),
        };
        let (topic, key, payload) = match encoded {
            Ok(encoded) => encoded,
            Err(error) => {
                tracing::error!(%error, "cannot encode a record; dropped");
                continue;
            }
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let producer = producer.clone();
        tokio::spawn(async move {
            if let Err(error) = producer.send_bytes(&topic, key.as_bytes(), &payload).await {
                ::metrics::counter!(RECORDS_DROPPED.name).increment(1);
                tracing::warn!(%topic, %error, "record not delivered");
            }
            drop(permit);
        });
    }
    // Wait for what is in flight.
    let _ = in_flight.acquire_many(IN_FLIGHT as u32).await;
}
