//! Where `replay` and `explain` read the history from, as their arguments
//! name it; reading it is `unicron_history`'s.

use unicron_codec::KafkaConfig;
use unicron_history::Origin;

/// Where to read the history from, as `replay` and `explain` take it.
#[derive(Debug, Clone, clap::Args)]
pub struct HistoryArgs {
    /// Read the history from Kafka (`kafka.brokers`, or --brokers).
    #[arg(long, conflicts_with = "from_archive")]
    pub from_kafka: bool,
    /// Read the history from an archive directory (docs/archive.md).
    #[arg(long, value_name = "DIR")]
    pub from_archive: Option<std::path::PathBuf>,
    /// Bootstrap servers for --from-kafka; defaults to `kafka.brokers`.
    #[arg(long, value_name = "HOST:PORT")]
    pub brokers: Option<String>,
}

impl HistoryArgs {
    /// The origin these arguments name, or a usage error.
    pub fn origin<'a>(
        &'a self,
        kafka: &'a KafkaConfig,
    ) -> Result<Origin<'a>, crate::usage::UsageError> {
        match (&self.from_archive, self.from_kafka) {
            (Some(dir), _) => Ok(Origin::Archive(dir)),
            (None, true) => {
                let brokers = self
                    .brokers
                    .clone()
                    .or_else(|| kafka.brokers.clone())
                    .ok_or_else(|| {
                        crate::usage::UsageError(
                            "--from-kafka needs --brokers or kafka.brokers".into(),
                        )
                    })?;
                Ok(Origin::Kafka {
                    config: kafka,
                    brokers,
                })
            }
            (None, false) => Err(crate::usage::UsageError(
                "say where the history is: --from-kafka or --from-archive DIR".into(),
            )),
        }
    }
}
