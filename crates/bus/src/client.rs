//! librdkafka client configurations from the `[kafka]` section.

use rdkafka::ClientConfig;
use unicron_codec::KafkaConfig;

/// The longest pause between reconnect attempts of every client unicron
/// makes (librdkafka adds up to 50% jitter): with it, the agents cut off by
/// one network fault are heard again within about 1.5 s of each other.
pub const RECONNECT_BACKOFF_MAX_MS: &str = "1000";

/// A client configuration for `brokers`.
pub fn client_config(kafka: &KafkaConfig, brokers: &str) -> ClientConfig {
    client_config_with(kafka, brokers, &[])
}

/// A client configuration for `brokers` with a client's own `defaults`,
/// then the pass-through properties, so a site can override anything.
pub fn client_config_with(
    kafka: &KafkaConfig,
    brokers: &str,
    defaults: &[(&str, String)],
) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", &kafka.client_id)
        // librdkafka backs off up to 10 s (+50% jitter) between
        // reconnects; after a network cut, agents would come back up
        // to 15 s apart and the detector's `resume_grace_s` would end
        // before the last one is heard. Kafka's Java client uses 1 s.
        .set("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX_MS);
    for (key, value) in defaults {
        config.set(*key, value);
    }
    for (key, value) in kafka.librdkafka_properties() {
        config.set(key, value);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthrough_properties_and_unicrons_defaults_reach_the_client() {
        let config: KafkaConfig = toml::from_str(
            r#"
            security.protocol = "SASL_SSL"
            "#,
        )
        .unwrap();
        let client = client_config(&config, "k1:9093");
        assert_eq!(client.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(client.get("client.id"), Some("unicron"));
        assert_eq!(client.get("reconnect.backoff.max.ms"), Some("1000"));
    }

    #[test]
    fn a_site_setting_overrides_the_reconnect_backoff() {
        let config: KafkaConfig = toml::from_str(r#""reconnect.backoff.max.ms" = 5000"#).unwrap();
        let client = client_config(&config, "k1:9093");
        assert_eq!(client.get("reconnect.backoff.max.ms"), Some("5000"));
    }
}
