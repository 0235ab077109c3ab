//! How soon a pattern-subscribed input topic created later is read.

use unicron_codec::KafkaConfig;

/// librdkafka's property that sets how soon a pattern subscription sees a
/// topic created after it.
const METADATA_REFRESH: &str = "topic.metadata.refresh.interval.ms";
const METADATA_MAX_AGE: &str = "metadata.max.age.ms";
/// librdkafka's own cache age at its default refresh (3 x 5 minutes).
const METADATA_MAX_AGE_MS: i64 = 15 * 60 * 1000;

/// Refreshes topic metadata every `every_s`, so a pattern-subscribed
/// topic created later is joined within about that time.
///
/// librdkafka ties the metadata cache's age limit to the refresh interval
/// (`metadata.max.age.ms` = 3 x refresh). At a 1-s refresh a refresh that
/// lands more than 3 s late (a loaded machine, a slow broker) lets the
/// subscribed topics expire from the cache; the consumer then sees its
/// subscription shrink and grow back and rejoins the group twice. On the
/// embedded broker every rejoin holds the group for the session timeout
/// less a second, the detector reads nothing meanwhile, and runs of one
/// seed diverged. Pinning the age limit to librdkafka's default keeps a
/// late refresh harmless; a deleted topic still leaves the cache at once,
/// because the broker's answer says so.
pub fn with_topic_discovery(kafka: &KafkaConfig, every_s: f64) -> KafkaConfig {
    let mut kafka = kafka.clone();
    let set: Vec<String> = kafka
        .librdkafka_properties()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    for (key, value) in [
        (METADATA_REFRESH, (every_s * 1000.0).round() as i64),
        (METADATA_MAX_AGE, METADATA_MAX_AGE_MS),
    ] {
        if !set.iter().any(|k| k == key) {
            kafka
                .properties
                .insert(key.into(), unicron_codec::config::PropertyValue::Int(value));
        }
    }
    kafka
}
