//! Classified failures (`unicron.failures`) and the evidence behind them.

use serde::{Deserialize, Serialize};

use crate::taxonomy::{FailureKind, Severity};

/// Which detection method raised a [`FailureEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DetectionMethod {
    LogRule,
    MetricRule,
    Heartbeat,
    ProcessSupervision,
    Statistical,
    Unknown,
    /// The learned tier named a line no rule took (last: Avro writes the
    /// variant's position, and the schema's symbols only grow at the end).
    Learned,
}

impl DetectionMethod {
    /// The symbol used in schemas and JSON.
    pub fn symbol(self) -> &'static str {
        match self {
            DetectionMethod::LogRule => "log_rule",
            DetectionMethod::MetricRule => "metric_rule",
            DetectionMethod::Heartbeat => "heartbeat",
            DetectionMethod::ProcessSupervision => "process_supervision",
            DetectionMethod::Statistical => "statistical",
            DetectionMethod::Learned => "learned",
            DetectionMethod::Unknown => "unknown",
        }
    }
}

/// A pointer to one source record, with a bounded excerpt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    #[serde(default)]
    pub node: Option<String>,
    pub excerpt: String,
}

/// One classified, correlated failure (`unicron.failures`, key: cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureEvent {
    pub id: String,
    pub cluster: String,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub gpu: Option<i32>,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub rank: Option<i32>,
    pub kind: FailureKind,
    pub severity: Severity,
    pub method: DetectionMethod,
    #[serde(default)]
    pub rule: Option<String>,
    pub evidence: Vec<Evidence>,
    pub first_evidence_ms: i64,
    pub detected_ms: i64,
    /// `straggler`: the median, over recent steps, of the node's compute
    /// time over its peers' median at that step.
    #[serde(default)]
    pub slowdown: Option<f64>,
}
