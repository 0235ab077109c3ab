//! unicron-agent: one per node. Runs the node's share of a training job's
//! workers as torchrun would (same variables, so a torchrun script runs
//! unchanged), reports what they do (heartbeats, every output line,
//! progress, exits, process states, the kernel log), and carries out the
//! planner's commands for its node through the executor's command protocol
//! (gate, dedupe, results). The planner is the rendezvous: start commands
//! name the nodes in rank order with a generation and master port.
//! Operator docs: `docs/agent.md`.

mod carrier;
mod error;
mod kernel_log;
pub mod metrics;
mod output;
mod pod_env;
mod preflight;
mod procfs;
mod progress;
mod report;
mod settings;
mod slurm_env;
pub mod snapshot;
mod supervisor;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use unicron_bus::Producer;
use unicron_codec::{KafkaConfig, Subscription, Topic};
use unicron_commands::CommandProcessor;
use unicron_runtime::{Durability, RuntimeError, RuntimeOptions, StartFrom};
use unicron_store::{Store, StoreOptions};

pub use self::metrics::METRICS;
pub use error::AgentError;
pub use pod_env::{LABELS_FILE, PodStep};
pub use progress::ProgressPatterns;
pub use settings::{AgentSettings, JobSettings};
pub use slurm_env::SlurmStep;

use crate::carrier::AgentCarrier;
use crate::report::{Reporter, now_ms, send_all};
use crate::supervisor::Supervisor;

const SERVICE: &str = "agent";
/// How often worker process states are read.
const STATE_POLL: Duration = Duration::from_millis(250);

/// Runs the agent until `shutdown` completes; its workers are stopped
/// before it returns.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: AgentSettings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    settings.validate()?;
    unicron_bus::metrics::describe_all(METRICS);
    let gate = unicron_commands::gate(
        "agent",
        &settings.cluster,
        &settings.public_keys,
        settings.command_ttl_s,
    )
    .map_err(|e| AgentError::Config(e.to_string()))?;
    let settings = Arc::new(settings);
    let started_ms = now_ms();

    let fenced = supervisor::fence(&settings.fence_tag());
    if fenced > 0 {
        tracing::warn!(
            fenced,
            "killed workers left behind by an earlier agent on this node"
        );
    }
    let (reporter, queue) = Reporter::new(&settings);
    unicron_bus::admin::ensure_cluster_topics(kafka, brokers, &settings.cluster).await?;
    let producer = Arc::new(Producer::new(kafka, brokers)?);
    let sender = tokio::spawn({
        let (kafka, producer) = (kafka.clone(), producer.clone());
        let cluster = settings.cluster.clone();
        async move { send_all(&kafka, &cluster, producer, queue).await }
    });
    if fenced > 0 {
        reporter.log(
            "agent",
            None,
            None,
            format!("unicron-agent: killed {fenced} processes left behind by an earlier agent on this node"),
            Default::default(),
        );
    }
    let snapshots = snapshot::Snapshots::start(&settings, reporter.clone()).await?;
    reporter.announce(
        &settings,
        snapshots.as_ref().and_then(|s| s.address.clone()),
    );
    if let Some(path) = &settings.kernel_log {
        kernel_log::spawn(path.clone(), reporter.clone());
    }
    let supervisor = Arc::new(Mutex::new(Supervisor::new(
        settings.clone(),
        reporter.clone(),
        snapshots,
    )));
    let beats = tokio::spawn(heartbeats(
        settings.clone(),
        reporter.clone(),
        supervisor.clone(),
    ));

    let store = Arc::new(
        Store::open(&settings.state_dir, StoreOptions { sync: false })
            .map_err(RuntimeError::from)?,
    );
    let carrier = AgentCarrier::new(
        settings.clone(),
        supervisor.clone(),
        reporter.clone(),
        started_ms,
    );
    let name = format!("agent/{}", settings.node);
    let mut processor = CommandProcessor::new(gate, carrier, &name, &store)?;
    let mut options = RuntimeOptions::new(
        SERVICE,
        settings.group(),
        vec![Subscription::Topic(Topic::Commands)],
        Durability::Store {
            store,
            start: StartFrom::StoredOffsets,
        },
    );
    options.cluster = Some(settings.cluster.clone());
    tracing::info!(cluster = %settings.cluster, node = %settings.node, jobs = settings.jobs.len(), observe_only = settings.observe_only, "agent starting");
    // Under Slurm the agent is a job step: it ends with its job, so the
    // allocation is given back.
    let done = supervisor.lock().await.done();
    let exit_when_done = settings.exit_when_done;
    let shutdown = async move {
        tokio::select! {
            _ = shutdown => {}
            _ = done.notified(), if exit_when_done => {
                tracing::info!("the job finished here; the agent exits");
            }
        }
    };
    let result = unicron_runtime::run(kafka, brokers, &options, &mut processor, shutdown).await;
    beats.abort();
    let stopped = supervisor
        .lock()
        .await
        .stop(None, "agent-shutdown", false)
        .await;
    // Its silence from now on is on purpose, not a node loss. (A killed
    // agent says nothing, and is found lost by its missing heartbeats.)
    let leaving = reporter.event(unicron_core::AgentEventKind::Leaving, None, None);
    reporter.send(report::Reported::Agent(leaving));
    tracing::info!(stopped, dropped = reporter.dropped(), "agent stopped");
    drop(processor);
    drop(supervisor);
    drop(reporter);
    let _ = tokio::time::timeout(Duration::from_secs(5), sender).await;
    result.map_err(AgentError::from)
}

/// Heartbeats every `heartbeat_interval_s`, and worker states every
/// [`STATE_POLL`]. Heartbeats never wait for the supervisor, which may be
/// busy stopping workers for a few seconds.
async fn heartbeats(
    settings: Arc<AgentSettings>,
    reporter: Arc<Reporter>,
    supervisor: Arc<Mutex<Supervisor>>,
) {
    let every = Duration::from_secs_f64(settings.heartbeat_interval_s);
    let mut beat = tokio::time::interval(every);
    let mut poll = tokio::time::interval(STATE_POLL);
    let mut job: Option<String> = None;
    loop {
        tokio::select! {
            _ = beat.tick() => {
                let event = reporter.event(unicron_core::AgentEventKind::Heartbeat, job.as_deref(), None);
                reporter.send(report::Reported::Agent(event));
            }
            _ = poll.tick() => {
                if let Ok(mut s) = supervisor.try_lock() {
                    s.poll_states();
                    job = s.running_job().map(str::to_string);
                }
            }
        }
    }
}
