//! OTLP metrics and logs, protobuf or JSON, as the Collector's `kafka`
//! exporter writes them (one export request per record).

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{NumberDataPoint, metric, number_data_point};
use prost::Message;

use super::time::nanos_ms;
use super::{Batches, Budget, Decoded, LabelMap, log, sample};

const SOURCE: &str = "otlp";

/// A request with no resources: protobuf reads bytes made only of fields it
/// does not know (and JSON `{}`) as an empty request, and the Collector
/// never exports one, so such a record is garbage, not an empty batch.
const NO_RESOURCES: &str = "the request carries no resources (not an OTLP export request?)";

pub fn metrics_proto(payload: &[u8], labels: &LabelMap) -> Decoded {
    match ExportMetricsServiceRequest::decode(payload) {
        Ok(request) if request.resource_metrics.is_empty() => {
            Decoded::failed(format!("otlp_proto metrics: {NO_RESOURCES}"))
        }
        Ok(request) => metrics(request, labels, Budget::for_payload(payload)),
        Err(e) => Decoded::failed(format!("otlp_proto metrics: {e}")),
    }
}

pub fn metrics_json(payload: &[u8], labels: &LabelMap) -> Decoded {
    match serde_json::from_slice::<ExportMetricsServiceRequest>(payload) {
        Ok(request) if request.resource_metrics.is_empty() => {
            Decoded::failed(format!("otlp_json metrics: {NO_RESOURCES}"))
        }
        Ok(request) => metrics(request, labels, Budget::for_payload(payload)),
        Err(e) => Decoded::failed(format!("otlp_json metrics: {e}")),
    }
}

pub fn logs_proto(payload: &[u8], labels: &LabelMap) -> Decoded {
    match ExportLogsServiceRequest::decode(payload) {
        Ok(request) if request.resource_logs.is_empty() => {
            Decoded::failed(format!("otlp_proto logs: {NO_RESOURCES}"))
        }
        Ok(request) => logs(request, labels, Budget::for_payload(payload)),
        Err(e) => Decoded::failed(format!("otlp_proto logs: {e}")),
    }
}

pub fn logs_json(payload: &[u8], labels: &LabelMap) -> Decoded {
    match serde_json::from_slice::<ExportLogsServiceRequest>(payload) {
        Ok(request) if request.resource_logs.is_empty() => {
            Decoded::failed(format!("otlp_json logs: {NO_RESOURCES}"))
        }
        Ok(request) => logs(request, labels, Budget::for_payload(payload)),
        Err(e) => Decoded::failed(format!("otlp_json logs: {e}")),
    }
}

fn metrics(request: ExportMetricsServiceRequest, labels: &LabelMap, mut budget: Budget) -> Decoded {
    let mut batches = Batches::default();
    let mut problems = Vec::new();
    'all: for resource_metrics in request.resource_metrics {
        let resource = attributes(
            resource_metrics
                .resource
                .as_ref()
                .map_or(&[][..], |r| &r.attributes[..]),
        );
        let resource_cost = Budget::cost(&resource);
        for scope in resource_metrics.scope_metrics {
            for m in scope.metrics {
                let points: &[NumberDataPoint] = match &m.data {
                    Some(metric::Data::Gauge(g)) => &g.data_points,
                    Some(metric::Data::Sum(s)) => &s.data_points,
                    // Histograms and summaries carry no failure signal here.
                    _ => continue,
                };
                for point in points {
                    let own = attributes(&point.attributes);
                    let cost = resource_cost + Budget::cost(&own) + m.name.len();
                    if let Err(e) = budget.charge(cost) {
                        problems.push(e);
                        break 'all;
                    }
                    let mut merged = resource.clone();
                    merged.extend(own);
                    let id = labels.identify(&merged);
                    let Some(node) = id.node.clone() else {
                        let problem = format!("metric `{}`: {}", m.name, labels.missing_node());
                        if budget.report(&mut problems, problem).is_err() {
                            break 'all;
                        }
                        continue;
                    };
                    let value = match point.value {
                        Some(number_data_point::Value::AsDouble(v)) => v,
                        Some(number_data_point::Value::AsInt(v)) => v as f64,
                        None => {
                            let problem =
                                format!("metric `{}`: data point without a value", m.name);
                            if budget.report(&mut problems, problem).is_err() {
                                break 'all;
                            }
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

fn logs(request: ExportLogsServiceRequest, labels: &LabelMap, mut budget: Budget) -> Decoded {
    let mut decoded = Decoded::default();
    'all: for resource_logs in request.resource_logs {
        let resource = attributes(
            resource_logs
                .resource
                .as_ref()
                .map_or(&[][..], |r| &r.attributes[..]),
        );
        let resource_cost = Budget::cost(&resource);
        for scope in resource_logs.scope_logs {
            for record in scope.log_records {
                let own = attributes(&record.attributes);
                if let Err(e) = budget.charge(resource_cost + Budget::cost(&own)) {
                    decoded.problems.push(e);
                    break 'all;
                }
                let mut merged = resource.clone();
                merged.extend(own);
                let id = labels.identify(&merged);
                let Some(node) = id.node.clone() else {
                    let problem = format!("log record: {}", labels.missing_node());
                    if budget.report(&mut decoded.problems, problem).is_err() {
                        break 'all;
                    }
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
