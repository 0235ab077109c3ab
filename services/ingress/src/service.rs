//! The ingress's step: a record of a cluster's own topic in; the same
//! bytes on the shared topic, or a dead letter, out. No state, at least
//! once: a record passed on twice after a crash is one the shared topics'
//! readers already take twice (ids, dedupe).

use std::future::Future;

use unicron_codec::{DecodeError, InboundRecord, KafkaConfig, Subscription, Topics};
use unicron_runtime::{
    Applied, Durability, Never, Processor, RuntimeOptions, Step, with_topic_discovery,
};

use crate::check::{Checked, check};
use crate::error::IngressError;
use crate::metrics::{FORWARDED, METRICS, REJECTED};
use crate::settings::IngressSettings;

/// The ingress's name in readiness, logs and metrics.
pub const SERVICE: &str = "ingress";

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
    let options = RuntimeOptions::new(
        SERVICE,
        &settings.group_id,
        vec![Subscription::Pattern(topics.ingress_pattern())],
        Durability::AtLeastOnce,
    );
    tracing::info!(group = %settings.group_id, pattern = %topics.ingress_pattern(), "ingress starting");
    let mut processor = Ingress { topics };
    let kafka = with_topic_discovery(kafka, settings.new_topic_check_s);
    unicron_runtime::run(&kafka, brokers, &options, &mut processor, shutdown).await?;
    Ok(())
}

struct Ingress {
    topics: Topics,
}

impl Processor for Ingress {
    type Input = Checked;
    type Action = Never;
    type Error = IngressError;

    fn decode(&self, record: &InboundRecord) -> Result<Checked, DecodeError> {
        check(&self.topics, &record.topic, &record.payload).unwrap_or_else(|| {
            Err(DecodeError::Invalid {
                record: "record",
                reason: format!("{} is not a cluster's own topic", record.topic),
            })
        })
    }

    fn apply(
        &mut self,
        checked: Checked,
        step: &mut Step<'_>,
    ) -> Result<Applied<Never>, IngressError> {
        match checked {
            Checked::Pass { to } => {
                let record = step.record();
                let key = record.key.clone().unwrap_or_default();
                ::metrics::counter!(FORWARDED.name, "topic" => to.clone()).increment(1);
                step.publish_bytes(&to, None, key, record.payload.clone());
            }
            Checked::Foreign { reason } => {
                tracing::warn!(topic = %step.record().topic, offset = step.record().offset, %reason, "refused");
                ::metrics::counter!(REJECTED.name, "reason" => unicron_codec::formats::FOREIGN_CLUSTER)
                    .increment(1);
                step.dead_letter(reason);
            }
        }
        Ok(Applied::Done)
    }

    fn describe_metrics(&self) {
        unicron_bus::metrics::describe_all(METRICS);
    }
}
