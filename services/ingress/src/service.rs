//! The ingress's step: a record of a cluster's own topic in; the same
//! bytes on the shared topic, a dead letter, or (over the cluster's
//! budget) nothing, out. No durable state, at least once: a record passed
//! on twice after a crash is one the shared topics' readers already take
//! twice (ids, dedupe).

use std::collections::BTreeMap;
use std::future::Future;

use unicron_codec::{DecodeError, InboundRecord, KafkaConfig, Subscription, Topics};
use unicron_core::ingress_budget::Budget;
use unicron_runtime::{
    Applied, BatchEnd, Durability, Never, Outgoing, Processor, RuntimeOptions, Step,
    with_topic_discovery,
};

use crate::check::{Checked, Verdict, check};
use crate::error::IngressError;
use crate::metrics::{FORWARDED, METRICS, REJECTED};
use crate::settings::IngressSettings;

/// The ingress's name in readiness, logs and metrics.
pub const SERVICE: &str = "ingress";

/// Records read together are passed on as one batch, pipelined with the
/// reading of the next (each forwarded one at a time, a round trip each,
/// the ingress kept up with 400 records a second).
const MAX_BATCH: usize = 2048;

/// A cluster over its budget is logged at its first dropped record and
/// then once every this many.
const LOG_DROPS_EVERY: u64 = 10_000;

/// Runs the ingress until `shutdown` completes or an unrecoverable error.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: &IngressSettings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), IngressError> {
    settings.validate()?;
    if !kafka.cluster_topics {
        return Err(IngressError::Config(
            "kafka.cluster_topics: the ingress passes on clusters' own topics, and they are off"
                .into(),
        ));
    }
    let topics = Topics::new(kafka);
    let mut options = RuntimeOptions::new(
        SERVICE,
        &settings.group_id,
        vec![Subscription::Pattern(topics.ingress_pattern())],
        Durability::AtLeastOnce,
    );
    options.max_batch = MAX_BATCH;
    tracing::info!(group = %settings.group_id, pattern = %topics.ingress_pattern(), budget = ?settings.budget, "ingress starting");
    let mut processor = Ingress {
        topics,
        budget: Budget::new(settings.budget),
        dropped: BTreeMap::new(),
        batch: BatchEnd::default(),
    };
    let kafka = with_topic_discovery(kafka, settings.new_topic_check_s);
    unicron_runtime::run(&kafka, brokers, &options, &mut processor, shutdown).await?;
    Ok(())
}

struct Ingress {
    topics: Topics,
    budget: Budget,
    /// Records dropped over budget, by cluster, for the log.
    dropped: BTreeMap<String, u64>,
    /// What this batch passes on and dead-letters, sent at its end.
    batch: BatchEnd,
}

impl Processor for Ingress {
    type Input = Checked;
    type Action = Never;
    type Error = IngressError;

    fn decode(&self, record: &InboundRecord) -> Result<Checked, DecodeError> {
        let key = record.key.as_deref().unwrap_or_default();
        check(&self.topics, &record.topic, key, &record.payload).ok_or_else(|| {
            DecodeError::Invalid {
                record: "record",
                reason: format!("{} is not a cluster's own topic", record.topic),
            }
        })
    }

    fn apply(
        &mut self,
        checked: Checked,
        step: &mut Step<'_>,
    ) -> Result<Applied<Never>, IngressError> {
        let record = step.record();
        // Whatever it says, a record spends its topic's cluster's budget:
        // refusals are dead letters, and those must not flood either.
        let time_ms = record.timestamp_ms.unwrap_or(i64::MIN);
        if let Err(over) = self
            .budget
            .admit(&checked.cluster, time_ms, record.payload.len())
        {
            ::metrics::counter!(REJECTED.name, "reason" => over.reason()).increment(1);
            let dropped = self.dropped.entry(checked.cluster.clone()).or_default();
            if dropped.is_multiple_of(LOG_DROPS_EVERY) {
                tracing::warn!(cluster = %checked.cluster, dropped = *dropped + 1, reason = over.reason(), "cluster over its budget: records dropped");
            }
            *dropped += 1;
            return Ok(Applied::Done);
        }
        match checked.verdict {
            Verdict::Pass { to, key } => {
                ::metrics::counter!(FORWARDED.name, "topic" => to.clone()).increment(1);
                if self.batch.groups.is_empty() {
                    self.batch.groups.push(Vec::new());
                }
                self.batch.groups[0].push(Outgoing {
                    topic: to,
                    partition: None,
                    key,
                    payload: record.payload.clone(),
                });
            }
            Verdict::Refuse { reason } => {
                let why = if reason.starts_with(unicron_codec::formats::FOREIGN_CLUSTER) {
                    unicron_codec::formats::FOREIGN_CLUSTER
                } else {
                    "undecodable"
                };
                tracing::warn!(topic = %record.topic, offset = record.offset, %reason, "refused");
                ::metrics::counter!(REJECTED.name, "reason" => why).increment(1);
                self.batch.dead_letters.push((record.clone(), reason));
            }
        }
        Ok(Applied::Done)
    }

    /// The batch's records go out together, before its records are
    /// marked done (at least once).
    fn end_batch(&mut self) -> Result<BatchEnd, IngressError> {
        Ok(std::mem::take(&mut self.batch))
    }

    fn describe_metrics(&self) {
        unicron_bus::metrics::describe_all(METRICS);
    }
}
