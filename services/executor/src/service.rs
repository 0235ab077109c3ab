//! The executor's consume → check → act → publish loop.
//!
//! Where reading starts: at the consumer group's committed offsets, not at
//! offsets kept in the store (the planner's `ResumeContext`). With an empty
//! store that would mean the beginning of the topic, and an executor moved
//! to a fresh disk would act again on a whole retention period of
//! commands. Instead the group says where to start, the offsets committed
//! with each result skip what was handled since the group's last
//! (asynchronous) commit, and the dedupe table catches the same command
//! arriving at another offset. What remains, a store lost together with a
//! few seconds of group commits, is covered by backends being idempotent
//! by command id (`docs/executor.md`).

use std::future::Future;

use unicron_bus::consumer::InboundRecord;
use unicron_bus::{AvroCodec, BusError, Consumer, DecodeError, KafkaConfig, Producer};
use unicron_core::executor::{self, Backoff, Gate, Outcome, Rejection};
use unicron_core::{Command, CommandResult, CommandStatus, DeadLetter};
use unicron_store::{Commit, OutboxEntry, Store, StoreError, StoreOptions};

use crate::backend::{Backend, Done};
use crate::dedupe::{self, Marker};
use crate::settings::ExecutorSettings;

const SERVICE: &str = "executor";
/// State key of the gate's watermark, so expiry survives restarts.
const WATERMARK_KEY: &[u8] = b"gate/watermark";

/// Errors that stop the executor. Bad records never do: they are
/// dead-lettered or rejected with a result.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// Runs the executor until `shutdown` completes or an unrecoverable error.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: &ExecutorSettings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ExecutorError> {
    settings.validate()?;
    describe_metrics();
    unicron_bus::metrics::register(SERVICE);
    let store = Store::open(
        &settings.state_dir,
        StoreOptions {
            sync: settings.sync_writes,
        },
    )?;
    let mut gate = settings.gate()?;
    if let Some(bytes) = store.state(WATERMARK_KEY)? {
        let bytes: [u8; 8] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| StoreError::Corrupt(format!("gate watermark of {} bytes", bytes.len())))?;
        gate.restore_watermark(i64::from_be_bytes(bytes));
    }
    let producer = Producer::new(kafka, brokers)?;
    let mut executor = Executor {
        store,
        producer,
        gate,
        backend: Backend::new(&settings.backend)?,
        backoff: settings.backoff,
        name: settings.name.clone(),
        commands_topic: kafka.topic("commands"),
        results_topic: kafka.topic("command-results"),
        dlq_topic: kafka.topic("dlq"),
        max_record_bytes: kafka.max_record_bytes,
        dlq_payload_bytes: kafka.dlq_payload_bytes,
        command_codec: AvroCodec::default(),
        result_codec: AvroCodec::default(),
        dead_letter_codec: AvroCodec::default(),
    };
    // Whatever a crash left unpublished goes out first.
    executor.drain().await?;

    let group = settings.group();
    let consumer = Consumer::new(kafka, brokers, &group)?;
    consumer.subscribe(&[&executor.commands_topic])?;
    tracing::info!(cluster = %settings.cluster, %group, state_dir = %settings.state_dir.display(), "executor running");

    // Ready while this loop runs; not ready once it ends, however it ends.
    let _ready = unicron_bus::metrics::ReadyGuard::new(SERVICE);
    tokio::pin!(shutdown);
    loop {
        let record = tokio::select! {
            record = consumer.recv() => record?,
            () = &mut shutdown => break,
        };
        if let Some(command) = executor.prepare(&record).await? {
            let done = tokio::select! {
                done = executor.backend.act(&command, &executor.backoff) => done,
                () = &mut shutdown => {
                    tracing::info!(command = %command.id, "stopping mid-action: it is sent again after a restart");
                    break;
                }
            };
            executor.finish(&record, &command, done).await?;
        }
        consumer.mark_done(&record)?;
    }
    consumer.commit_now()?;
    tracing::info!("executor stopped");
    Ok(())
}

struct Executor {
    store: Store,
    producer: Producer,
    gate: Gate,
    backend: Backend,
    backoff: Backoff,
    name: String,
    commands_topic: String,
    results_topic: String,
    dlq_topic: String,
    max_record_bytes: usize,
    dlq_payload_bytes: usize,
    command_codec: AvroCodec<Command>,
    result_codec: AvroCodec<CommandResult>,
    dead_letter_codec: AvroCodec<DeadLetter>,
}

impl Executor {
    /// Handles everything up to acting: returns the command to act on (its
    /// started marker and Accepted result already committed and published),
    /// or `None` when the record is fully handled.
    async fn prepare(&mut self, record: &InboundRecord) -> Result<Option<Command>, ExecutorError> {
        // The key routes; the signed `cluster` field authorises (checked by
        // the gate). Another cluster's traffic is none of our business.
        if record.key.as_deref() != Some(self.gate.cluster().as_bytes()) {
            return Ok(None);
        }
        if self
            .store
            .offset(&record.topic, record.partition)?
            .is_some_and(|next| record.offset < next)
        {
            return Ok(None); // handled before the group's last commit
        }
        let mut commit = Commit::new();
        commit.consumed(&record.topic, record.partition, record.offset + 1);
        let command = match self.decode(record) {
            Ok(command) => command,
            Err(error) => {
                self.dead_letter(&mut commit, record, &error.to_string())?;
                return self.commit(commit).await.map(|()| None);
            }
        };
        let marker = self
            .store
            .remembered(&dedupe::key(&command.id))?
            .map(|bytes| Marker::decode(&bytes));
        if let Some(Marker::Finished(status)) = marker {
            tracing::info!(command = %command.id, ?status, "duplicate: already handled");
            metrics::counter!("unicron_executor_duplicates_total").increment(1);
            return self.commit(commit).await.map(|()| None);
        }
        let checked = self.gate.check(&command);
        commit.put_state(WATERMARK_KEY, self.gate.watermark_ms().to_be_bytes());
        // A started command passed the gate and may have acted: once its
        // signature holds it gets a final answer, even if the settings
        // changed across the restart (a shorter TTL, say).
        let resumed = marker == Some(Marker::Started);
        if let Err(rejection) = checked
            && !(resumed && verified(&rejection))
        {
            tracing::warn!(command = %command.id, reason = %rejection, "rejected");
            metrics::counter!("unicron_executor_rejections_total", "reason" => rejection.label())
                .increment(1);
            // An unverified id is whatever the sender wrote: remembering it
            // would let a forgery shadow the real command of that id.
            if verified(&rejection) {
                commit.remember(
                    dedupe::key(&command.id),
                    Marker::Finished(CommandStatus::Rejected).encode(),
                );
            }
            let reason = Some(rejection.to_string());
            self.publish(
                &mut commit,
                &command,
                CommandStatus::Rejected,
                reason,
                0,
                None,
            )?;
            return self.commit(commit).await.map(|()| None);
        }
        if resumed {
            tracing::info!(command = %command.id, "started before a restart: sending it again");
        } else {
            // Not the consumed offset: if we stop before the backend
            // answers, the record comes back and is sent again.
            let mut started = Commit::new();
            started.put_state(WATERMARK_KEY, self.gate.watermark_ms().to_be_bytes());
            started.remember(dedupe::key(&command.id), Marker::Started.encode());
            self.publish(
                &mut started,
                &command,
                CommandStatus::Accepted,
                None,
                0,
                None,
            )?;
            self.commit(started).await?;
        }
        Ok(Some(command))
    }

    /// Commits the backend's answer with the consumed offset, then publishes it.
    async fn finish(
        &mut self,
        record: &InboundRecord,
        command: &Command,
        done: Done,
    ) -> Result<(), ExecutorError> {
        let status = match done.outcome {
            Outcome::Succeeded => CommandStatus::Succeeded,
            Outcome::Failed => CommandStatus::Failed,
        };
        tracing::info!(command = %command.id, action = command.action.symbol(), ?status, reason = ?done.reason, "acted");
        let mut commit = Commit::new();
        commit.consumed(&record.topic, record.partition, record.offset + 1);
        commit.remember(dedupe::key(&command.id), Marker::Finished(status).encode());
        self.publish(
            &mut commit,
            command,
            status,
            done.reason,
            done.duration_ms,
            done.completed_ms,
        )?;
        self.commit(commit).await
    }

    fn decode(&self, record: &InboundRecord) -> Result<Command, DecodeError> {
        if record.payload.len() > self.max_record_bytes {
            return Err(DecodeError::Oversized {
                size: record.payload.len(),
                limit: self.max_record_bytes,
            });
        }
        self.command_codec.decode(&record.payload)
    }

    /// Queues the result of `command`. It carries this executor's cluster
    /// and is keyed by it, whatever the command claims, so a record that is
    /// not ours never reaches another cluster's planner.
    fn publish(
        &self,
        commit: &mut Commit,
        command: &Command,
        status: CommandStatus,
        reason: Option<String>,
        duration_ms: i64,
        completed_ms: Option<i64>,
    ) -> Result<(), ExecutorError> {
        let mut result = executor::result(
            command,
            status,
            reason,
            duration_ms,
            completed_ms,
            &self.name,
        );
        result.cluster = self.gate.cluster().to_string();
        metrics::counter!(
            "unicron_executor_commands_total",
            "action" => command.action.symbol(),
            "status" => dedupe::status_name(status)
        )
        .increment(1);
        commit.publish(OutboxEntry {
            topic: self.results_topic.clone(),
            key: result.cluster.clone().into_bytes(),
            payload: self.result_codec.encode(&result)?,
        });
        Ok(())
    }

    fn dead_letter(
        &self,
        commit: &mut Commit,
        record: &InboundRecord,
        reason: &str,
    ) -> Result<(), ExecutorError> {
        let (key, payload) = unicron_bus::dlq::encode_dead_letter(
            record,
            reason,
            SERVICE,
            self.dlq_payload_bytes,
            &self.dead_letter_codec,
        )?;
        commit.publish(OutboxEntry {
            topic: self.dlq_topic.clone(),
            key,
            payload,
        });
        Ok(())
    }

    async fn commit(&self, commit: Commit) -> Result<(), ExecutorError> {
        self.store.commit(commit)?;
        self.drain().await
    }

    /// Publishes pending outbox entries in order, removing each once acknowledged.
    async fn drain(&self) -> Result<(), ExecutorError> {
        for (key, entry) in self.store.outbox()? {
            self.producer
                .send_bytes(&entry.topic, &entry.key, &entry.payload)
                .await?;
            self.store.outbox_delivered(key)?;
        }
        Ok(())
    }
}

/// Whether the command's signature held (it was refused for another reason).
fn verified(rejection: &Rejection) -> bool {
    !matches!(rejection, Rejection::Unsigned | Rejection::Forged(_))
}

fn describe_metrics() {
    metrics::describe_counter!(
        "unicron_executor_commands_total",
        "Results published, by action and status (accepted, succeeded, failed, rejected)."
    );
    metrics::describe_counter!(
        "unicron_executor_rejections_total",
        "Commands refused without acting, by reason (unsigned, forged, foreign, expired, unknown_action)."
    );
    metrics::describe_counter!(
        "unicron_executor_duplicates_total",
        "Commands seen again after they were handled, not acted on."
    );
    metrics::describe_counter!(
        "unicron_executor_retries_total",
        "Backend attempts retried after a transient error."
    );
    metrics::describe_histogram!(
        "unicron_executor_backend_seconds",
        "Time from the first backend attempt to the final answer, retries included, seconds."
    );
}
