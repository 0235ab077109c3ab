//! Decoders for what observability pipelines already put on Kafka: the
//! OpenTelemetry Collector's `kafka` exporter (OTLP protobuf and JSON),
//! prometheus-kafka-adapter JSON, Vector's `json` codec and Fluent Bit's
//! `json` format. Each turns one Kafka record into the detector's
//! observations; nothing here classifies anything.

mod fluent_bit;
pub mod labels;
mod otlp;
mod prometheus;
mod rsyslog;
pub mod time;
mod vector;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use unicron_core::detector::Observation;
use unicron_core::{LogRecord, MetricSample, TelemetryBatch};

pub use labels::{Identity, LabelMap};

/// Defines [`InputFormat`] once: each format with its configuration name
/// and whether its records say what they carry (`signal` needed or not).
/// `ALL`, `name()` and `needs_signal()` come from this table; the docs'
/// list of formats and the fuzz tests follow `ALL`.
macro_rules! input_formats {
    ($($(#[$doc:meta])* $format:ident = $name:literal, needs_signal: $signal:literal;)*) => {
        /// The wire format of an external topic.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum InputFormat {
            $($(#[$doc])* #[serde(rename = $name)] $format,)*
        }

        impl InputFormat {
            /// Every format, in the order of the docs.
            pub const ALL: &'static [InputFormat] = &[$(InputFormat::$format,)*];

            /// The name in `[[detector.inputs]] format`.
            pub fn name(self) -> &'static str {
                match self {
                    $(InputFormat::$format => $name,)*
                }
            }

            /// Whether a topic of this format must say `signal` (metrics or
            /// logs): the OTLP requests differ by signal.
            pub fn needs_signal(self) -> bool {
                match self {
                    $(InputFormat::$format => $signal,)*
                }
            }
        }
    };
}

input_formats! {
    /// One `Export{Metrics,Logs}ServiceRequest` per record, protobuf.
    OtlpProto = "otlp_proto", needs_signal: true;
    /// The same request in OTLP/JSON.
    OtlpJson = "otlp_json", needs_signal: true;
    /// prometheus-kafka-adapter's JSON: one sample per record.
    PrometheusJson = "prometheus_json", needs_signal: false;
    /// Vector's `json` codec: a metric event or a log event per record.
    VectorJson = "vector_json", needs_signal: false;
    /// Fluent Bit's Kafka output with `format json`: a log per record.
    FluentBitJson = "fluent_bit_json", needs_signal: false;
    /// rsyslog's omkafka with unicron's JSON template: a log per record.
    RsyslogJson = "rsyslog_json", needs_signal: false;
}

/// Whether an OTLP topic carries metrics or logs (the request types differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    Metrics,
    Logs,
}

/// One external topic the detector reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalInput {
    /// Full topic name (no prefix is added: these are the site's topics).
    pub topic: String,
    pub format: InputFormat,
    /// Needed for OTLP; ignored by formats that say what they carry.
    #[serde(default)]
    pub signal: Option<Signal>,
    #[serde(default)]
    pub labels: LabelMap,
    /// Read the topic only if it exists (subscribed by pattern, so it is
    /// picked up when it is created later).
    #[serde(default)]
    pub optional: bool,
    /// The one cluster this topic carries: a pipeline (rsyslog, the
    /// OpenTelemetry Collector) bound to a cluster by its topic, which
    /// Kafka's ACLs let only that cluster's principal write. Records
    /// without a cluster attribute (or naming `labels.default_cluster`)
    /// are its; observations naming another cluster are dropped and the
    /// record dead-lettered `foreign_cluster: ...`.
    #[serde(default)]
    pub cluster: Option<String>,
}

impl ExternalInput {
    /// What sites already ship, read when it exists: the OpenTelemetry
    /// Collector's default topics and the topic of unicron's rsyslog
    /// configuration (`deploy/rsyslog/`).
    pub fn site_defaults() -> Vec<ExternalInput> {
        let optional = |topic: &str, format, signal| ExternalInput {
            topic: topic.into(),
            format,
            signal,
            labels: LabelMap::default(),
            optional: true,
            cluster: None,
        };
        vec![
            optional(
                "otlp_metrics",
                InputFormat::OtlpProto,
                Some(Signal::Metrics),
            ),
            optional("otlp_logs", InputFormat::OtlpProto, Some(Signal::Logs)),
            optional("rsyslog", InputFormat::RsyslogJson, None),
        ]
    }

    /// The field that makes this input unusable, as `field: reason`.
    pub fn validate(&self) -> Result<(), String> {
        if self.topic.is_empty() {
            return Err("topic: must not be empty".into());
        }
        if self.cluster.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err(
                "cluster: must not be empty (leave it out for a topic of many clusters)".into(),
            );
        }
        if self.format.needs_signal() && self.signal.is_none() {
            return Err(format!(
                "signal: topic `{}` is {}; say `metrics` or `logs`",
                self.topic,
                self.format.name()
            ));
        }
        Ok(())
    }
}

/// What one external record decodes to: observations, and problems with
/// parts of it (the record is dead-lettered with them; the rest is used).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decoded {
    pub observations: Vec<Observation>,
    pub problems: Vec<String>,
}

impl Decoded {
    fn failed(reason: String) -> Decoded {
        Decoded {
            observations: Vec::new(),
            problems: vec![reason],
        }
    }
}

/// Decodes one record of an external topic.
pub fn decode(input: &ExternalInput, payload: &[u8]) -> Decoded {
    if payload.is_empty() {
        return Decoded::failed("empty record".into());
    }
    let labels = &input.labels;
    let decoded = match (input.format, input.signal) {
        (InputFormat::OtlpProto, Some(Signal::Metrics)) => otlp::metrics_proto(payload, labels),
        (InputFormat::OtlpProto, Some(Signal::Logs)) => otlp::logs_proto(payload, labels),
        (InputFormat::OtlpJson, Some(Signal::Metrics)) => otlp::metrics_json(payload, labels),
        (InputFormat::OtlpJson, Some(Signal::Logs)) => otlp::logs_json(payload, labels),
        (InputFormat::OtlpProto | InputFormat::OtlpJson, None) => {
            Decoded::failed("OTLP input without a signal".into())
        }
        (InputFormat::PrometheusJson, _) => prometheus::decode(payload, labels),
        (InputFormat::VectorJson, _) => vector::decode(payload, labels),
        (InputFormat::FluentBitJson, _) => fluent_bit::decode(payload, labels),
        (InputFormat::RsyslogJson, _) => rsyslog::decode(payload, labels),
    };
    match &input.cluster {
        Some(bound) => decoded.bound_to(bound, &labels.default_cluster),
        None => decoded,
    }
}

impl Decoded {
    /// What of it belongs to `bound`: the default cluster (no attribute
    /// named one) becomes `bound`; another cluster's observations go, and
    /// the record is dead-lettered with the reason.
    fn bound_to(mut self, bound: &str, default: &str) -> Decoded {
        let mut foreign = BTreeMap::<String, usize>::new();
        self.observations.retain_mut(|o| {
            let cluster = o.cluster();
            if cluster == bound {
                return true;
            }
            if cluster == default {
                o.set_cluster(bound);
                return true;
            }
            *foreign.entry(cluster.to_string()).or_default() += 1;
            false
        });
        for (cluster, n) in foreign {
            self.problems.push(format!(
                "{FOREIGN_CLUSTER}: {n} observations of cluster {cluster:?} on a topic bound to cluster {bound:?}"
            ));
        }
        self
    }
}

/// The reason a record is dead-lettered with when it speaks for a cluster
/// its topic is not bound to (the first word of its dead letter).
pub const FOREIGN_CLUSTER: &str = "foreign_cluster";

/// Collects samples into one telemetry batch per (cluster, node), in order
/// of first appearance.
#[derive(Default)]
struct Batches {
    order: Vec<(String, String)>,
    batches: BTreeMap<(String, String), Vec<MetricSample>>,
}

impl Batches {
    fn push(&mut self, cluster: String, node: String, sample: MetricSample) {
        let key = (cluster, node);
        if !self.batches.contains_key(&key) {
            self.order.push(key.clone());
        }
        self.batches.entry(key).or_default().push(sample);
    }

    fn into_observations(mut self, source: &str) -> Vec<Observation> {
        self.order
            .into_iter()
            .map(|key| {
                let samples = self.batches.remove(&key).unwrap_or_default();
                Observation::Telemetry(TelemetryBatch {
                    cluster: key.0,
                    node: key.1,
                    source: source.into(),
                    samples,
                })
            })
            .collect()
    }
}

/// A sample with identity resolved from its labels.
fn sample(
    name: String,
    value: f64,
    time_ms: i64,
    id: &Identity,
    labels: BTreeMap<String, String>,
) -> MetricSample {
    MetricSample {
        name,
        value,
        time_ms,
        gpu: id.gpu,
        job: id.job.clone(),
        rank: id.rank,
        labels,
    }
}

/// A log line with identity resolved from its attributes.
fn log(
    id: &Identity,
    node: String,
    time_ms: i64,
    source: &str,
    line: String,
    attributes: BTreeMap<String, String>,
) -> Observation {
    Observation::Log(LogRecord {
        cluster: id.cluster.clone(),
        node,
        time_ms,
        source: source.into(),
        job: id.job.clone(),
        rank: id.rank,
        gpu: id.gpu,
        line,
        attributes,
    })
}

/// Parses a record that must be one JSON object (the JSON formats).
fn json_object(
    payload: &[u8],
    format: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, Decoded> {
    match serde_json::from_slice(payload) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(Decoded::failed(format!(
            "{format}: record is not a JSON object"
        ))),
        Err(e) => Err(Decoded::failed(format!("{format}: {e}"))),
    }
}

/// How much one record may expand to when decoded: labels and attributes
/// are copied into every sample and log line (OTLP resource attributes into
/// each data point, a JSON object's path into each flattened key), so a
/// small record could otherwise ask for gigabytes. A record that needs more
/// than `EXPANSION_FACTOR` × its size + `EXPANSION_SLACK` bytes is
/// dead-lettered (an OTLP request keeps what it decoded before the limit).
pub const EXPANSION_FACTOR: usize = 64;
pub const EXPANSION_SLACK: usize = 1 << 20;
/// Bytes charged per label on top of its key and value (map node, headers).
const ENTRY_COST: usize = 64;

/// The bytes a record may still expand to.
struct Budget {
    left: usize,
    limit: usize,
}

impl Budget {
    fn for_payload(payload: &[u8]) -> Budget {
        let limit = payload
            .len()
            .saturating_mul(EXPANSION_FACTOR)
            .saturating_add(EXPANSION_SLACK);
        Budget { left: limit, limit }
    }

    /// Takes `bytes` from the budget, or says why the record is too big.
    fn charge(&mut self, bytes: usize) -> Result<(), String> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(format!(
                "record expands to more than {} bytes of labels and lines ({EXPANSION_FACTOR} times its size, plus {EXPANSION_SLACK})",
                self.limit
            )),
        }
    }

    /// Records `problem`, charged like the rest; over the budget, the
    /// budget's reason is recorded instead and `Err` says to stop.
    fn report(&mut self, problems: &mut Vec<String>, problem: String) -> Result<(), ()> {
        match self.charge(problem.len() + ENTRY_COST) {
            Ok(()) => {
                problems.push(problem);
                Ok(())
            }
            Err(e) => {
                problems.push(e);
                Err(())
            }
        }
    }

    /// What copying `labels` costs.
    fn cost(labels: &BTreeMap<String, String>) -> usize {
        labels
            .iter()
            .map(|(k, v)| k.len() + v.len() + ENTRY_COST)
            .sum()
    }
}

/// Flattens a top-level JSON object into dotted keys with string values.
fn flatten_object(
    object: &serde_json::Map<String, serde_json::Value>,
    out: &mut BTreeMap<String, String>,
    budget: &mut Budget,
) -> Result<(), String> {
    for (k, v) in object {
        flatten(k, v, out, budget)?;
    }
    Ok(())
}

/// Flattens a JSON object into dotted keys with string values; every key
/// built and value copied is charged to `budget`.
fn flatten(
    prefix: &str,
    value: &serde_json::Value,
    out: &mut BTreeMap<String, String>,
    budget: &mut Budget,
) -> Result<(), String> {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                budget.charge(prefix.len() + 1 + k.len() + ENTRY_COST)?;
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out, budget)?;
            }
        }
        serde_json::Value::String(s) => {
            budget.charge(prefix.len() + s.len() + ENTRY_COST)?;
            out.insert(prefix.to_string(), s.clone());
        }
        serde_json::Value::Null => {}
        other => {
            let text = other.to_string();
            budget.charge(prefix.len() + text.len() + ENTRY_COST)?;
            out.insert(prefix.to_string(), text);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rsyslog(cluster: Option<&str>) -> ExternalInput {
        ExternalInput {
            topic: "site-a.rsyslog".into(),
            format: InputFormat::RsyslogJson,
            signal: None,
            labels: LabelMap::default(),
            optional: false,
            cluster: cluster.map(str::to_string),
        }
    }

    fn line(extra: &str) -> Vec<u8> {
        format!(
            r#"{{"@timestamp":"2026-12-04T16:50:06Z","host":"gpu-node-17"{extra},"message":"NCCL WARN Timeout"}}"#
        )
        .into_bytes()
    }

    #[test]
    fn a_topic_bound_to_a_cluster_carries_that_cluster_only() {
        let bound = rsyslog(Some("a"));
        // No cluster attribute: the topic's cluster.
        let own = decode(&bound, &line(""));
        assert!(own.problems.is_empty(), "{:?}", own.problems);
        assert_eq!(own.observations[0].cluster(), "a");
        assert_eq!(
            decode(&bound, &line(r#","cluster":"a""#))
                .observations
                .len(),
            1
        );
        // Claiming another cluster: dropped, with the reason.
        let forged = decode(&bound, &line(r#","cluster":"b""#));
        assert!(forged.observations.is_empty());
        assert_eq!(
            forged.problems,
            [r#"foreign_cluster: 1 observations of cluster "b" on a topic bound to cluster "a""#]
        );
        // Unbound, the record's own word stands.
        let free = decode(&rsyslog(None), &line(r#","cluster":"b""#));
        assert_eq!(free.observations[0].cluster(), "b");
        assert_eq!(
            rsyslog(Some(" ")).validate().unwrap_err(),
            "cluster: must not be empty (leave it out for a topic of many clusters)"
        );
    }
}
