//! Fluent Bit's Kafka output with `format json`: one log per record, the
//! time in `@timestamp` as epoch seconds (a float), the line in `log` (tail
//! input) or `message`/`MESSAGE` (syslog, systemd).

use std::collections::BTreeMap;

use serde_json::Value;

use super::time::epoch_seconds_ms;
use super::{Budget, Decoded, LabelMap, flatten_object, json_object, log};

pub fn decode(payload: &[u8], labels: &LabelMap) -> Decoded {
    let object = match json_object(payload, "fluent_bit_json") {
        Ok(object) => object,
        Err(failed) => return failed,
    };
    let time_ms = match object.get("@timestamp").and_then(Value::as_f64) {
        Some(seconds) => match epoch_seconds_ms(seconds) {
            Ok(ms) => ms,
            Err(e) => return Decoded::failed(format!("fluent_bit_json: @timestamp: {e}")),
        },
        None => return Decoded::failed("fluent_bit_json: no numeric `@timestamp`".into()),
    };
    let Some(line) = ["log", "message", "MESSAGE"]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
    else {
        return Decoded::failed("fluent_bit_json: no `log` or `message` field".into());
    };
    let mut fields = BTreeMap::new();
    let mut budget = Budget::for_payload(payload);
    if let Err(e) = flatten_object(&object, &mut fields, &mut budget) {
        return Decoded::failed(format!("fluent_bit_json: {e}"));
    }
    for key in ["log", "message", "MESSAGE", "@timestamp"] {
        fields.remove(key);
    }
    let id = labels.identify(&fields);
    let Some(node) = id.node.clone() else {
        return Decoded::failed(format!("fluent_bit_json: {}", labels.missing_node()));
    };
    Decoded {
        observations: vec![log(
            &id,
            node,
            time_ms,
            "fluent-bit",
            line.trim_end().to_string(),
            fields,
        )],
        problems: Vec::new(),
    }
}
