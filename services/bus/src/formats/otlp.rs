//! OTLP metrics and logs, protobuf or JSON, as the Collector's `kafka`
//! exporter writes them (one export request per record).

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{NumberDataPoint, metric, number_data_point};
use prost::Message;

use super::time::nanos_ms;
use super::{Batches, Decoded, LabelMap, log, sample};

const SOURCE: &str = "otlp";

pub fn metrics_proto(payload: &[u8], labels: &LabelMap) -> Decoded {
    match ExportMetricsServiceRequest::decode(payload) {
        Ok(request) => metrics(request, labels),
        Err(e) => Decoded::failed(format!("otlp_proto metrics: {e}")),
    }
}

pub fn metrics_json(payload: &[u8], labels: &LabelMap) -> Decoded {
    match serde_json::from_slice::<ExportMetricsServiceRequest>(payload) {
        Ok(request) => metrics(request, labels),
        Err(e) => Decoded::failed(format!("otlp_json metrics: {e}")),
    }
}

pub fn logs_proto(payload: &[u8], labels: &LabelMap) -> Decoded {
    match ExportLogsServiceRequest::decode(payload) {
        Ok(request) => logs(request, labels),
        Err(e) => Decoded::failed(format!("otlp_proto logs: {e}")),
    }
}

pub fn logs_json(payload: &[u8], labels: &LabelMap) -> Decoded {
    match serde_json::from_slice::<ExportLogsServiceRequest>(payload) {
        Ok(request) => logs(request, labels),
        Err(e) => Decoded::failed(format!("otlp_json logs: {e}")),
    }
}

fn metrics(request: ExportMetricsServiceRequest, labels: &LabelMap) -> Decoded {
    let mut batches = Batches::default();
    let mut problems = Vec::new();
    for resource_metrics in request.resource_metrics {
        let resource = attributes(
            resource_metrics
                .resource
                .as_ref()
                .map_or(&[][..], |r| &r.attributes[..]),
        );
        for scope in resource_metrics.scope_metrics {
            for m in scope.metrics {
                let points: &[NumberDataPoint] = match &m.data {
                    Some(metric::Data::Gauge(g)) => &g.data_points,
                    Some(metric::Data::Sum(s)) => &s.data_points,
                    // Histograms and summaries carry no failure signal here.
                    _ => continue,
                };
                for point in points {
                    let mut merged = resource.clone();
                    merged.extend(attributes(&point.attributes));
                    let id = labels.identify(&merged);
                    let Some(node) = id.node.clone() else {
                        problems.push(format!("metric `{}`: {}", m.name, labels.missing_node()));
                        continue;
                    };
                    let value = match point.value {
                        Some(number_data_point::Value::AsDouble(v)) => v,
                        Some(number_data_point::Value::AsInt(v)) => v as f64,
                        None => {
                            problems
                                .push(format!("metric `{}`: data point without a value", m.name));
                            continue;
                        }
                    };
                    let cluster = id.cluster.clone();
                    batches.push(
                        cluster,
                        node,
                        sample(
                            m.name.clone(),
                            value,
                            nanos_ms(point.time_unix_nano),
                            &id,
                            merged,
                        ),
                    );
                }
            }
        }
    }
    Decoded {
        observations: batches.into_observations(SOURCE),
        problems,
    }
}

fn logs(request: ExportLogsServiceRequest, labels: &LabelMap) -> Decoded {
    let mut decoded = Decoded::default();
    for resource_logs in request.resource_logs {
        let resource = attributes(
            resource_logs
                .resource
                .as_ref()
                .map_or(&[][..], |r| &r.attributes[..]),
        );
        for scope in resource_logs.scope_logs {
            for record in scope.log_records {
                let mut merged = resource.clone();
                merged.extend(attributes(&record.attributes));
                let id = labels.identify(&merged);
                let Some(node) = id.node.clone() else {
                    decoded
                        .problems
                        .push(format!("log record: {}", labels.missing_node()));
                    continue;
                };
                let nanos = if record.time_unix_nano != 0 {
                    record.time_unix_nano
                } else {
                    record.observed_time_unix_nano
                };
                let line = record.body.as_ref().map(text).unwrap_or_default();
                decoded
                    .observations
                    .push(log(&id, node, nanos_ms(nanos), SOURCE, line, merged));
            }
        }
    }
    decoded
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .filter_map(|kv| Some((kv.key.clone(), text(kv.value.as_ref()?))))
        .collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::BytesValue(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(any_value::Value::ArrayValue(a)) => {
            let parts: Vec<String> = a.values.iter().map(text).collect();
            format!("[{}]", parts.join(", "))
        }
        Some(any_value::Value::KvlistValue(kv)) => {
            let parts: Vec<String> = kv
                .values
                .iter()
                .map(|p| {
                    format!(
                        "{}={}",
                        p.key,
                        p.value.as_ref().map(text).unwrap_or_default()
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Some(any_value::Value::StringValueStrindex(_)) | None => String::new(),
    }
}
