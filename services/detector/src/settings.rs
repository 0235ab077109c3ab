use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use unicron_codec::formats::ExternalInput;
use unicron_core::detector::{DetectorConfig, LogRules};

use crate::error::DetectorError;

/// A detector ready to run ([`DetectorSettings::build`]): its settings,
/// checked, and its log rules, compiled once.
pub struct DetectorService {
    pub(crate) settings: DetectorSettings,
    pub(crate) rules: LogRules,
    /// `rules_file`'s text the rules were compiled from (empty: none).
    pub(crate) rules_text: String,
}

impl DetectorService {
    /// The compiled log rules (built-in plus `detector.rules_file`).
    pub fn rules(&self) -> &LogRules {
        &self.rules
    }
}

/// The `[detector]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectorSettings {
    /// Consumer group shared by detector instances.
    pub group_id: String,
    /// A TOML rules file layered over the built-in rules (same format as
    /// `crates/core/rules/log_rules.toml`).
    pub rules_file: Option<PathBuf>,
    /// External topics and their formats. The default reads the
    /// OpenTelemetry Collector's `otlp_metrics` and `otlp_logs` when they exist.
    pub inputs: Vec<ExternalInput>,
    /// Deadlines, windows and metric thresholds.
    pub tuning: DetectorConfig,
    /// After a lost broker connection, heartbeat and hang timers wait this
    /// many wall-clock seconds from the next record read, so producers can
    /// flush what they queued during the outage before silence counts as
    /// failure. The only wall-clock setting of the detector; 0 turns it off.
    pub outage_grace_s: f64,
    /// How often the consumer looks for new topics matching an optional
    /// input's pattern (librdkafka's `topic.metadata.refresh.interval.ms`).
    /// 1 s: a Collector or rsyslog started after unicron is read within
    /// about a second on Kafka (librdkafka's default is 300 s). The
    /// metadata cache's age limit is pinned apart from it (see
    /// `with_topic_discovery`). A `[kafka]` setting of either property wins.
    pub new_topic_check_s: f64,
    /// Wall-clock seconds after which a cluster with no new record on
    /// caught-up inputs gets an idle tick, so held symptoms and timers
    /// fire on a quiet input (a cluster whose only input is one log
    /// stream, or whose nodes all died). Ticks are in the detector's
    /// rounds, so replay sees them. 0 turns them off.
    pub idle_tick_s: f64,
    /// Heartbeat and hang timers wait while a partition has more than this
    /// many unread records (the detector is behind; a heartbeat may be
    /// among them). 0 turns it off.
    pub lag_guard_records: u64,
    /// ... or while a partition with unread records trails the newest
    /// partition by more than this many seconds of event time. 0 turns it
    /// off.
    pub lag_guard_s: f64,
    /// The most records one round applies. A round costs one round record
    /// written and acknowledged before its failures go out, so under
    /// backlog larger rounds read faster; the bound caps how long a round's
    /// first record waits (a few milliseconds at 4,096).
    pub round_max_records: usize,
    /// After a takeover (a start, or the group moving partitions), the
    /// seconds of input below the committed offsets read again to rebuild
    /// state: nodes already silent, symptoms the previous owner held. It
    /// should cover the heartbeat deadline, the correlation window and the
    /// hang stall; each second costs a second of input read at start. 0
    /// turns it off.
    pub warm_up_s: f64,
    /// The most records a warm-up reads again per partition.
    pub warm_up_max_records: u64,
}

impl Default for DetectorSettings {
    fn default() -> Self {
        DetectorSettings {
            group_id: "unicron-detector".into(),
            rules_file: None,
            inputs: ExternalInput::site_defaults(),
            tuning: DetectorConfig::default(),
            outage_grace_s: 30.0,
            new_topic_check_s: 1.0,
            idle_tick_s: 2.0,
            lag_guard_records: 20_000,
            lag_guard_s: 15.0,
            round_max_records: 4096,
            warm_up_s: 10.0,
            warm_up_max_records: 100_000,
        }
    }
}

impl DetectorSettings {
    /// The compiled rules: built-ins plus `rules_file`.
    pub fn rules(&self) -> Result<LogRules, DetectorError> {
        Ok(self.rules_and_text()?.0)
    }

    fn rules_and_text(&self) -> Result<(LogRules, String), DetectorError> {
        let Some(path) = &self.rules_file else {
            return Ok((LogRules::builtin(), String::new()));
        };
        let bad = |e: &dyn std::fmt::Display| {
            DetectorError::Config(format!("detector.rules_file: {}: {e}", path.display()))
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(&e))?;
        let rules = LogRules::with_user(&text).map_err(|e| bad(&e))?;
        Ok((rules, text))
    }

    /// The settings checked once and built into what the detector runs
    /// with: the log rules compiled.
    pub fn build(&self) -> Result<DetectorService, DetectorError> {
        self.validate()?;
        let (rules, rules_text) = self.rules_and_text()?;
        Ok(DetectorService {
            rules,
            rules_text,
            settings: self.clone(),
        })
    }

    /// The first setting that makes no sense, naming its field.
    pub fn validate(&self) -> Result<(), DetectorError> {
        self.tuning
            .validate()
            .map_err(|e| DetectorError::Config(format!("detector.tuning.{e}")))?;
        if !(self.outage_grace_s.is_finite() && (0.0..=3600.0).contains(&self.outage_grace_s)) {
            return Err(DetectorError::Config(format!(
                "detector.outage_grace_s: {} is not between 0 and 3600 seconds",
                self.outage_grace_s
            )));
        }
        for (field, value, min) in [
            ("new_topic_check_s", self.new_topic_check_s, 0.1),
            ("idle_tick_s", self.idle_tick_s, 0.0),
            ("lag_guard_s", self.lag_guard_s, 0.0),
            ("warm_up_s", self.warm_up_s, 0.0),
        ] {
            if !(value.is_finite() && (min..=3600.0).contains(&value)) {
                return Err(DetectorError::Config(format!(
                    "detector.{field}: {value} is not between {min} and 3600 seconds"
                )));
            }
        }
        if !(1..=1_000_000).contains(&self.round_max_records) {
            return Err(DetectorError::Config(format!(
                "detector.round_max_records: {} is not between 1 and 1000000",
                self.round_max_records
            )));
        }
        if !(1..=10_000_000).contains(&self.warm_up_max_records) {
            return Err(DetectorError::Config(format!(
                "detector.warm_up_max_records: {} is not between 1 and 10000000",
                self.warm_up_max_records
            )));
        }
        for (i, input) in self.inputs.iter().enumerate() {
            input
                .validate()
                .map_err(|e| DetectorError::Config(format!("detector.inputs[{i}].{e}")))?;
        }
        Ok(())
    }
}
