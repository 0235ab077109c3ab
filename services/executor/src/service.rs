//! The executor: the command protocol (`unicron-commands`) carried out by
//! the configured backend. The runtime (unicron-runtime) does the rest.
//!
//! Where reading starts: at the consumer group's committed offsets, not at
//! offsets kept in the store (the planner's way). With an empty store that
//! would mean the beginning of the topic, and an executor moved to a fresh
//! disk would act again on a whole retention period of commands. Instead
//! the group says where to start, the offsets committed with each result
//! skip what was handled since the group's last (asynchronous) commit, and
//! the dedupe table catches the same command arriving at another offset.
//! What remains, a store lost together with a few seconds of group
//! commits, is covered by backends being idempotent by command id
//! (`docs/executor.md`).

use std::future::Future;
use std::sync::Arc;

use unicron_codec::{KafkaConfig, Subscription, Topic};
use unicron_commands::{Carrier, CommandProcessor, Done, Part};
use unicron_core::Command;
use unicron_core::executor::Backoff;
use unicron_runtime::{Durability, RuntimeOptions, StartFrom};
use unicron_store::{Store, StoreOptions};

use crate::backend::Backend;
use crate::error::ExecutorError;
use crate::metrics::METRICS;
use crate::settings::ExecutorService;

const SERVICE: &str = "executor";

/// Runs the executor (built by [`crate::ExecutorSettings::build`]) until
/// `shutdown` completes or an unrecoverable error.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    executor: ExecutorService,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ExecutorError> {
    let ExecutorService {
        settings,
        gate,
        backend,
    } = executor;
    let store = Arc::new(Store::open(
        &settings.state_dir,
        StoreOptions {
            sync: settings.sync_writes,
        },
    )?);
    let carrier = BackendCarrier {
        backend,
        backoff: settings.backoff,
    };
    let mut processor = CommandProcessor::new(gate, carrier, &settings.name, &store)?;
    let mut options = RuntimeOptions::new(
        SERVICE,
        settings.group(),
        vec![Subscription::Topic(Topic::Commands)],
        Durability::Store {
            store,
            start: StartFrom::GroupOffsets,
        },
    );
    options.cluster = Some(settings.cluster.clone());
    unicron_bus::admin::ensure_cluster_topics(kafka, brokers, &settings.cluster).await?;
    tracing::info!(cluster = %settings.cluster, group = %options.group_id, state_dir = %settings.state_dir.display(), "executor starting");
    unicron_bus::metrics::describe_all(METRICS);
    unicron_runtime::run(kafka, brokers, &options, &mut processor, shutdown).await?;
    Ok(())
}

/// The executor's carrier: the configured backend for the whole cluster.
struct BackendCarrier {
    backend: Backend,
    backoff: Backoff,
}

impl Carrier for BackendCarrier {
    fn part(&self, command: &Command) -> Part {
        self.backend.part(command)
    }

    async fn act(&mut self, command: &Command) -> Done {
        self.backend.act(command, &self.backoff).await
    }
}
