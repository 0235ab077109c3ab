//! prometheus-kafka-adapter JSON: `{"timestamp": RFC 3339, "value": "1.5",
//! "name": "...", "labels": {...}}`, one sample per record. `value` is a
//! string and may be `"NaN"` or `"+Inf"` (the detector rejects those only
//! for metrics it needs).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::time::rfc3339_ms;
use super::{Batches, Decoded, LabelMap, sample};

#[derive(Deserialize)]
struct AdapterSample {
    timestamp: String,
    value: String,
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

pub fn decode(payload: &[u8], labels: &LabelMap) -> Decoded {
    let record: AdapterSample = match serde_json::from_slice(payload) {
        Ok(r) => r,
        Err(e) => return Decoded::failed(format!("prometheus_json: {e}")),
    };
    let time_ms = match rfc3339_ms(&record.timestamp) {
        Ok(t) => t,
        Err(e) => return Decoded::failed(format!("prometheus_json: timestamp: {e}")),
    };
    let value: f64 = match record.value.trim().parse() {
        Ok(v) => v,
        Err(_) => {
            return Decoded::failed(format!(
                "prometheus_json: value `{}` is not a number",
                record.value
            ));
        }
    };
    let id = labels.identify(&record.labels);
    let Some(node) = id.node.clone() else {
        return Decoded::failed(format!("prometheus_json: {}", labels.missing_node()));
    };
    let mut batches = Batches::default();
    batches.push(
        id.cluster.clone(),
        node,
        sample(record.name, value, time_ms, &id, record.labels),
    );
    Decoded {
        observations: batches.into_observations("prometheus-kafka-adapter"),
        problems: Vec::new(),
    }
}
