//! Vector's `json` codec. A metric event has `name`, `tags`, `timestamp` and
//! one value object (`counter`, `gauge`, ...); anything else is a log event
//! with `message`, `timestamp` and `host`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::time::rfc3339_ms;
use super::{
    Batches, Budget, Decoded, LabelMap, flatten, flatten_object, json_object, log, sample,
};

const SOURCE: &str = "vector";

pub fn decode(payload: &[u8], labels: &LabelMap) -> Decoded {
    let object = match json_object(payload, "vector_json") {
        Ok(object) => object,
        Err(failed) => return failed,
    };
    let time_ms = match object.get("timestamp").and_then(Value::as_str) {
        Some(t) => match rfc3339_ms(t) {
            Ok(ms) => ms,
            Err(e) => return Decoded::failed(format!("vector_json: timestamp: {e}")),
        },
        None => return Decoded::failed("vector_json: no `timestamp`".into()),
    };
    let value = ["counter", "gauge"]
        .iter()
        .find_map(|k| object.get(*k).and_then(|v| v.get("value")));
    if let (Some(name), Some(value)) = (object.get("name").and_then(Value::as_str), value) {
        let Some(value) = value.as_f64() else {
            return Decoded::failed(format!(
                "vector_json: metric `{name}`: value is not a number"
            ));
        };
        let mut tags = BTreeMap::new();
        if let Some(t) = object.get("tags")
            && let Err(e) = flatten("", t, &mut tags, &mut Budget::for_payload(payload))
        {
            return Decoded::failed(format!("vector_json: metric `{name}`: tags: {e}"));
        }
        let id = labels.identify(&tags);
        let Some(node) = id.node.clone() else {
            return Decoded::failed(format!("vector_json: {}", labels.missing_node()));
        };
        let mut batches = Batches::default();
        batches.push(
            id.cluster.clone(),
            node,
            sample(name.to_string(), value, time_ms, &id, tags),
        );
        return Decoded {
            observations: batches.into_observations(SOURCE),
            problems: Vec::new(),
        };
    }
    if object.contains_key("name")
        && [
            "distribution",
            "histogram",
            "summary",
            "set",
            "aggregated_histogram",
            "aggregated_summary",
        ]
        .iter()
        .any(|k| object.contains_key(*k))
    {
        return Decoded::default(); // metric types without a failure signal
    }
    let Some(line) = ["message", "log"]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
    else {
        return Decoded::failed("vector_json: log event without `message`".into());
    };
    let mut fields = BTreeMap::new();
    if let Err(e) = flatten_object(&object, &mut fields, &mut Budget::for_payload(payload)) {
        return Decoded::failed(format!("vector_json: {e}"));
    }
    fields.remove("message");
    let id = labels.identify(&fields);
    let Some(node) = id.node.clone() else {
        return Decoded::failed(format!("vector_json: {}", labels.missing_node()));
    };
    Decoded {
        observations: vec![log(&id, node, time_ms, SOURCE, line.to_string(), fields)],
        problems: Vec::new(),
    }
}
