//! rsyslog's omkafka with the JSON template in `deploy/rsyslog/`: one log
//! per record, the time in `@timestamp` as RFC 3339 (`timereported`), the
//! line in `message`, the sender in `host`, and the program, file and
//! severity beside them.

use std::collections::BTreeMap;

use serde_json::Value;

use super::time::rfc3339_ms;
use super::{Budget, Decoded, LabelMap, flatten_object, json_object, log};

const FORMAT: &str = "rsyslog_json";

pub fn decode(payload: &[u8], labels: &LabelMap) -> Decoded {
    let object = match json_object(payload, FORMAT) {
        Ok(object) => object,
        Err(failed) => return failed,
    };
    let time_ms = match object.get("@timestamp").and_then(Value::as_str) {
        Some(t) => match rfc3339_ms(t) {
            Ok(ms) => ms,
            Err(e) => return Decoded::failed(format!("{FORMAT}: @timestamp: {e}")),
        },
        None => return Decoded::failed(format!("{FORMAT}: no `@timestamp` string")),
    };
    let Some(line) = ["message", "msg"]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
    else {
        return Decoded::failed(format!("{FORMAT}: no `message` field"));
    };
    let mut fields = BTreeMap::new();
    let mut budget = Budget::for_payload(payload);
    if let Err(e) = flatten_object(&object, &mut fields, &mut budget) {
        return Decoded::failed(format!("{FORMAT}: {e}"));
    }
    for key in ["message", "msg", "@timestamp"] {
        fields.remove(key);
    }
    let id = labels.identify(&fields);
    let Some(node) = id.node.clone() else {
        return Decoded::failed(format!("{FORMAT}: {}", labels.missing_node()));
    };
    // imfile keeps the line as written; syslog messages may carry the
    // space after the tag.
    let line = line.trim().to_string();
    Decoded {
        observations: vec![log(&id, node, time_ms, "rsyslog", line, fields)],
        problems: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicron_core::detector::Observation;

    #[test]
    fn the_deploy_template_decodes_to_a_line_of_its_host() {
        let record = br#"{"@timestamp":"2026-12-04T16:50:06.123456+00:00","host":"gpu-node-17","program":"training","file":"/var/log/training/rank0.log","severity":"notice","message":"RuntimeError: CUDA error: an illegal memory access was encountered"}"#;
        let decoded = decode(record, &LabelMap::default());
        assert!(decoded.problems.is_empty(), "{:?}", decoded.problems);
        let Observation::Log(log) = &decoded.observations[0] else {
            panic!("{:?}", decoded.observations);
        };
        assert_eq!(log.node, "gpu-node-17");
        assert_eq!(log.time_ms, 1_796_403_006_123);
        assert!(log.line.starts_with("RuntimeError: CUDA error"));
        assert_eq!(
            log.attributes.get("file").map(String::as_str),
            Some("/var/log/training/rank0.log")
        );
    }

    #[test]
    fn a_record_without_time_or_message_says_which() {
        let no_time = decode(br#"{"host":"n","message":"x"}"#, &LabelMap::default());
        assert_eq!(
            no_time.problems,
            vec!["rsyslog_json: no `@timestamp` string"]
        );
        let no_message = decode(
            br#"{"@timestamp":"2026-12-04T16:50:06Z","host":"n"}"#,
            &LabelMap::default(),
        );
        assert_eq!(
            no_message.problems,
            vec!["rsyslog_json: no `message` field"]
        );
    }
}
