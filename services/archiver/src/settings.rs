use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use unicron_codec::archive::{DEFAULT_MAX_FILE_AGE, DEFAULT_MAX_FILE_BYTES, WriterOptions};
use unicron_codec::schemas::RecordType;
use unicron_codec::{KafkaConfig, Topology};

use crate::error::ArchiverError;

/// Smallest `max_file_bytes`: every file starts with its schema, a few KiB.
const MIN_FILE_BYTES: u64 = 1024;

/// The `[archiver]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiverSettings {
    /// The archive directory: `<dir>/<topic>/<partition>-<first>-<last>.avro`.
    pub dir: PathBuf,
    /// Consumer group; its committed offsets say where archiving resumes.
    pub group_id: String,
    /// A file is closed once it reaches this size, bytes.
    pub max_file_bytes: u64,
    /// A file is closed once it has been open this long, seconds.
    pub max_file_age_s: f64,
    /// Topics to archive, as named in the topology (`failures`, without the
    /// prefix). Empty: every topic of the topology.
    pub topics: Vec<String>,
}

impl Default for ArchiverSettings {
    fn default() -> Self {
        ArchiverSettings {
            dir: PathBuf::from("unicron-archive"),
            group_id: "unicron-archiver".to_string(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_file_age_s: DEFAULT_MAX_FILE_AGE.as_secs_f64(),
            topics: Vec::new(),
        }
    }
}

impl ArchiverSettings {
    /// The first setting that makes no sense, naming its field.
    pub fn validate(&self) -> Result<(), ArchiverError> {
        if self.dir.as_os_str().is_empty() {
            return Err(config("archiver.dir: must not be empty"));
        }
        if self.group_id.is_empty() {
            return Err(config("archiver.group_id: must not be empty"));
        }
        if self.max_file_bytes < MIN_FILE_BYTES {
            return Err(config(format!(
                "archiver.max_file_bytes: {} is below the minimum of {MIN_FILE_BYTES} (each file starts with its schema)",
                self.max_file_bytes
            )));
        }
        if !(self.max_file_age_s.is_finite()
            && self.max_file_age_s > 0.0
            && self.max_file_age_s < 1e9)
        {
            return Err(config(format!(
                "archiver.max_file_age_s: must be a positive number of seconds, not {}",
                self.max_file_age_s
            )));
        }
        let topology = Topology::builtin();
        let mut seen = BTreeSet::new();
        for name in &self.topics {
            if topology.get(name).is_none() {
                let known: Vec<&str> = topology.topics.iter().map(|t| t.name.as_str()).collect();
                return Err(config(format!(
                    "archiver.topics: `{name}` is not a topic of the topology (known, without the prefix: {})",
                    known.join(", ")
                )));
            }
            if !seen.insert(name) {
                return Err(config(format!("archiver.topics: `{name}` is listed twice")));
            }
        }
        Ok(())
    }

    /// The topics to archive, full names (with the prefix of `kafka`), and
    /// the record type of each.
    pub fn topics(&self, kafka: &KafkaConfig) -> BTreeMap<String, RecordType> {
        Topology::builtin()
            .topics
            .iter()
            .filter(|t| {
                // By default what the topology says the archiver reads
                // (not the planner's checkpoints: derived, and large).
                if self.topics.is_empty() {
                    t.consumers.iter().any(|c| c == "archiver")
                } else {
                    self.topics.contains(&t.name)
                }
            })
            .map(|t| {
                let record = RecordType::from_name(&t.record)
                    .expect("the topology's record names are validated");
                (kafka.topic(&t.name), record)
            })
            .collect()
    }

    /// The archive writer's options.
    pub fn writer_options(&self, kafka: &KafkaConfig) -> WriterOptions {
        WriterOptions {
            max_file_bytes: self.max_file_bytes,
            max_file_age: Duration::from_secs_f64(self.max_file_age_s),
            max_record_bytes: kafka.max_record_bytes,
        }
    }
}

fn config(message: impl Into<String>) -> ArchiverError {
    ArchiverError::Config(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(settings: &ArchiverSettings) -> String {
        settings.validate().unwrap_err().to_string()
    }

    #[test]
    fn defaults_archive_every_topic_but_the_planners_checkpoints() {
        let settings = ArchiverSettings::default();
        settings.validate().unwrap();
        let topics = settings.topics(&KafkaConfig::default());
        assert_eq!(topics.len(), Topology::builtin().topics.len() - 1);
        assert!(!topics.contains_key("unicron.planner-checkpoints"));
        assert_eq!(
            topics.get("unicron.failures"),
            Some(&RecordType::FailureEvent)
        );
        assert_eq!(topics.get("unicron.dlq"), Some(&RecordType::DeadLetter));
        let options = settings.writer_options(&KafkaConfig::default());
        assert_eq!(options.max_file_bytes, 64 * 1024 * 1024);
        assert_eq!(options.max_file_age, Duration::from_secs(600));
        assert_eq!(options.max_record_bytes, 1024 * 1024);
    }

    #[test]
    fn a_section_parses_from_toml_and_rejects_unknown_keys() {
        let settings: ArchiverSettings = toml::from_str(
            r#"
            dir = "/var/lib/unicron/archive"
            max_file_bytes = 1048576
            max_file_age_s = 60
            topics = ["failures", "decisions"]
            "#,
        )
        .unwrap();
        settings.validate().unwrap();
        assert_eq!(settings.group_id, "unicron-archiver");
        let kafka = KafkaConfig {
            topic_prefix: "acme.".into(),
            ..KafkaConfig::default()
        };
        let topics: Vec<String> = settings.topics(&kafka).into_keys().collect();
        assert_eq!(topics, ["acme.decisions", "acme.failures"]);
        assert!(toml::from_str::<ArchiverSettings>("max_file_size = 1").is_err());
    }

    #[test]
    fn errors_name_the_field() {
        let s = ArchiverSettings {
            max_file_bytes: 10,
            ..ArchiverSettings::default()
        };
        assert!(
            error(&s).starts_with("archiver.max_file_bytes: 10 "),
            "{}",
            error(&s)
        );

        let s = ArchiverSettings {
            max_file_age_s: 0.0,
            ..ArchiverSettings::default()
        };
        assert!(
            error(&s).starts_with("archiver.max_file_age_s: "),
            "{}",
            error(&s)
        );

        let s = ArchiverSettings {
            dir: PathBuf::new(),
            ..ArchiverSettings::default()
        };
        assert_eq!(error(&s), "archiver.dir: must not be empty");

        let s = ArchiverSettings {
            group_id: String::new(),
            ..ArchiverSettings::default()
        };
        assert_eq!(error(&s), "archiver.group_id: must not be empty");

        let s = ArchiverSettings {
            topics: vec!["unicron.failures".into()],
            ..ArchiverSettings::default()
        };
        assert!(
            error(&s).starts_with("archiver.topics: `unicron.failures` is not a topic"),
            "{}",
            error(&s)
        );

        let s = ArchiverSettings {
            topics: vec!["logs".into(), "logs".into()],
            ..ArchiverSettings::default()
        };
        assert_eq!(error(&s), "archiver.topics: `logs` is listed twice");
    }
}
