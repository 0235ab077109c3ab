//! The command protocol every carrier shares, as a runtime `Processor`.

use unicron_codec::{AvroCodec, DecodeError, InboundRecord};
use unicron_core::executor::{self, Gate, Outcome, Rejection};
use unicron_core::{Command, CommandStatus};
use unicron_runtime::{Act, Applied, Processor, RuntimeError, Step};
use unicron_store::{Store, StoreError};

use crate::carrier::{Carrier, Done, Part};
use crate::dedupe::{self, Marker};
use crate::metrics::{COMMANDS, DUPLICATES, METRICS, REJECTIONS};

/// State key of the gate's watermark, so expiry survives restarts.
const WATERMARK_KEY: &[u8] = b"gate/watermark";

/// The command protocol every carrier shares: the gate (signature,
/// cluster, expiry), at most once per command id through the dedupe
/// table, the Accepted result before acting and the final one after, both
/// committed with the step. The executor runs it with a backend, each
/// `unicron agent` with its node's workers.
pub struct CommandProcessor<C> {
    gate: Gate,
    carrier: C,
    name: String,
    command_codec: AvroCodec<Command>,
}

impl<C: Carrier> CommandProcessor<C> {
    /// A processor for `gate`'s cluster whose results name `name`; the
    /// gate's expiry watermark resumes from `store`.
    pub fn new(
        mut gate: Gate,
        carrier: C,
        name: &str,
        store: &Store,
    ) -> Result<CommandProcessor<C>, RuntimeError> {
        if let Some(bytes) = store.state(WATERMARK_KEY)? {
            let bytes: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
                RuntimeError::from(StoreError::Corrupt(format!(
                    "gate watermark of {} bytes",
                    bytes.len()
                )))
            })?;
            gate.restore_watermark(i64::from_be_bytes(bytes));
        }
        Ok(CommandProcessor {
            gate,
            carrier,
            name: name.to_string(),
            command_codec: AvroCodec::default(),
        })
    }

    pub fn carrier(&self) -> &C {
        &self.carrier
    }
}

impl<C: Carrier> Processor for CommandProcessor<C> {
    type Input = Command;
    type Action = Command;
    type Error = RuntimeError;

    /// The key routes; the signed `cluster` field authorises (checked by
    /// the gate). Another cluster's traffic is none of our business.
    fn wants(&self, record: &InboundRecord) -> bool {
        record.key.as_deref() == Some(self.gate.cluster().as_bytes())
    }

    fn decode(&self, record: &InboundRecord) -> Result<Command, DecodeError> {
        self.command_codec.decode(&record.payload)
    }

    /// Everything up to acting: a duplicate or rejected command is handled
    /// here; one to act on gets its started marker and Accepted result.
    fn apply(
        &mut self,
        command: Command,
        step: &mut Step<'_>,
    ) -> Result<Applied<Command>, RuntimeError> {
        let part = self.carrier.part(&command);
        if part == Part::Skip {
            return Ok(Applied::Done);
        }
        let answer = part == Part::Answer;
        let marker = step
            .remembered(&dedupe::key(&command.id))?
            .map(|bytes| Marker::decode(&bytes));
        if let Some(Marker::Finished(status)) = marker {
            tracing::info!(command = %command.id, ?status, "duplicate: already handled");
            ::metrics::counter!(DUPLICATES.name).increment(1);
            return Ok(Applied::Done);
        }
        let checked = self.gate.check(&command);
        step.put_state(WATERMARK_KEY, self.gate.watermark_ms().to_be_bytes());
        // A started command passed the gate and may have acted: once its
        // signature holds it gets a final answer, even if the settings
        // changed across the restart (a shorter TTL, say).
        let resumed = marker == Some(Marker::Started);
        if let Err(rejection) = checked
            && !(resumed && verified(&rejection))
        {
            tracing::warn!(command = %command.id, reason = %rejection, "rejected");
            ::metrics::counter!(REJECTIONS.name, "reason" => rejection.label()).increment(1);
            // An unverified id is whatever the sender wrote: remembering it
            // would let a forgery shadow the real command of that id.
            if verified(&rejection) {
                step.remember(
                    dedupe::key(&command.id),
                    Marker::Finished(CommandStatus::Rejected).encode(),
                );
            }
            if answer {
                let reason = Some(rejection.to_string());
                self.publish(step, &command, CommandStatus::Rejected, reason, 0, None)?;
            }
            return Ok(Applied::Done);
        }
        if resumed {
            tracing::info!(command = %command.id, "started before a restart: sending it again");
        } else {
            // Committed without the consumed offset: if we stop before the
            // backend answers, the record comes back and is sent again.
            step.remember(dedupe::key(&command.id), Marker::Started.encode());
            if answer {
                self.publish(step, &command, CommandStatus::Accepted, None, 0, None)?;
            }
        }
        Ok(Applied::Act(command))
    }

    fn describe_metrics(&self) {
        unicron_bus::metrics::describe_all(METRICS);
    }
}

/// A command that passed the gate, carried out by the carrier.
impl<C: Carrier> Act<CommandProcessor<C>> for Command {
    type Outcome = Done;

    async fn act(&self, processor: &mut CommandProcessor<C>) -> Done {
        processor.carrier.act(self).await
    }

    /// The carrier's answer, committed with the consumed offset.
    fn finish(
        self,
        done: Done,
        processor: &mut CommandProcessor<C>,
        step: &mut Step<'_>,
    ) -> Result<(), RuntimeError> {
        let command = self;
        let status = match done.outcome {
            Outcome::Succeeded => CommandStatus::Succeeded,
            Outcome::Failed => CommandStatus::Failed,
        };
        tracing::info!(command = %command.id, action = command.action.symbol(), ?status, reason = ?done.reason, "acted");
        step.remember(dedupe::key(&command.id), Marker::Finished(status).encode());
        if processor.carrier.part(&command) != Part::Answer {
            return Ok(());
        }
        processor.publish(
            step,
            &command,
            status,
            done.reason,
            done.duration_ms,
            done.completed_ms,
        )
    }
}

impl<C: Carrier> CommandProcessor<C> {
    /// Queues the result of `command`. It carries this executor's cluster
    /// and is keyed by it, whatever the command claims, so a record that is
    /// not ours never reaches another cluster's planner.
    fn publish(
        &self,
        step: &mut Step<'_>,
        command: &Command,
        status: CommandStatus,
        reason: Option<String>,
        duration_ms: i64,
        completed_ms: Option<i64>,
    ) -> Result<(), RuntimeError> {
        let mut result = executor::result(
            command,
            status,
            reason,
            duration_ms,
            completed_ms,
            &self.name,
        );
        result.cluster = self.gate.cluster().to_string();
        result.node = self.carrier.node().map(str::to_string);
        ::metrics::counter!(
            COMMANDS.name,
            "action" => command.action.symbol(),
            "status" => dedupe::status_name(status)
        )
        .increment(1);
        step.send(result.cluster.as_bytes(), &result)?;
        Ok(())
    }
}

/// Whether the command's signature held (it was refused for another reason).
fn verified(rejection: &Rejection) -> bool {
    !matches!(rejection, Rejection::Unsigned | Rejection::Forged(_))
}
