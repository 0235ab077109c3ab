//! The InfiniteHBD trace's format (StepFun, `stepfun-ai/InfiniteHBD-Trace`):
//! a JSON array of `fault_start` and `fault_end` events, each with a node
//! id, a time in days and a three-level category, in time order.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::RealFault;
use crate::faults::TraceError;

#[derive(Deserialize)]
struct Event {
    node_id: String,
    /// Days after the trace's time 0.
    event_time: f64,
    event_type: String,
    fault_type: Category,
}

#[derive(Deserialize, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "PascalCase")]
struct Category {
    level: String,
    class: String,
    desc: String,
}

const DAY_S: f64 = 86_400.0;

/// The faults of a trace in this format, by start time: each `fault_start`
/// paired with the next `fault_end` of the same node and category. A fault
/// still open at the end lasts until the trace's last event.
pub fn parse(text: &str, path: &str) -> Result<Vec<RealFault>, TraceError> {
    let events: Vec<Event> = serde_json::from_str(text).map_err(|e| TraceError::Format {
        path: path.to_string(),
        reason: format!("not an InfiniteHBD trace: {e}"),
    })?;
    let bad = |index: usize, field: &'static str, reason: String| TraceError::Event {
        path: path.to_string(),
        index: index + 1,
        field,
        reason,
    };
    // (node, category) → (start, the event's position), while open.
    let mut open: BTreeMap<(String, Category), (f64, usize)> = BTreeMap::new();
    let mut faults = Vec::new();
    let mut last = 0.0_f64;
    for (index, event) in events.into_iter().enumerate() {
        if !event.event_time.is_finite() || event.event_time < 0.0 {
            return Err(bad(
                index,
                "event_time",
                format!("{} is not days ≥ 0", event.event_time),
            ));
        }
        last = last.max(event.event_time);
        let key = (event.node_id, event.fault_type);
        match event.event_type.as_str() {
            "fault_start" => {
                if open.contains_key(&key) {
                    return Err(bad(
                        index,
                        "event_type",
                        format!("{} starts `{}` again before it ended", key.0, key.1.desc),
                    ));
                }
                open.insert(key, (event.event_time, index));
            }
            "fault_end" => {
                let Some((start, _)) = open.remove(&key) else {
                    return Err(bad(
                        index,
                        "event_type",
                        format!("{} ends `{}`, which never started", key.0, key.1.desc),
                    ));
                };
                if event.event_time < start {
                    return Err(bad(
                        index,
                        "event_time",
                        format!("ends at day {} before it started", event.event_time),
                    ));
                }
                faults.push(fault(key, start, event.event_time));
            }
            other => {
                return Err(bad(
                    index,
                    "event_type",
                    format!("`{other}` is neither fault_start nor fault_end"),
                ));
            }
        }
    }
    for (key, (start, _)) in open {
        faults.push(fault(key, start, last));
    }
    faults.sort_by(|a, b| {
        a.start_s
            .total_cmp(&b.start_s)
            .then_with(|| a.server.cmp(&b.server))
            .then_with(|| a.class.cmp(&b.class))
            .then_with(|| a.desc.cmp(&b.desc))
    });
    Ok(faults)
}

fn fault((server, category): (String, Category), start_d: f64, end_d: f64) -> RealFault {
    RealFault {
        server,
        start_s: start_d * DAY_S,
        end_s: end_d * DAY_S,
        level: category.level,
        class: category.class,
        desc: category.desc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(node: &str, day: f64, kind: &str, desc: &str) -> String {
        format!(
            r#"{{"node_id":"{node}","event_time":{day},"event_type":"{kind}","fault_type":{{"Level":"Hardware Failure","Class":"GPU","Desc":"{desc}"}}}}"#
        )
    }

    #[test]
    fn starts_pair_with_their_ends_and_open_faults_last_to_the_end() {
        let text = format!(
            "[{},{},{},{},{}]",
            event("a", 1.0, "fault_start", "GPU Lost"),
            event("b", 1.5, "fault_start", "GPU Lost"),
            event("a", 2.0, "fault_end", "GPU Lost"),
            event("a", 3.0, "fault_start", "GPU Lost"),
            event("a", 4.0, "fault_end", "GPU Lost"),
        );
        let faults = parse(&text, "t.json").unwrap();
        let got: Vec<(&str, f64, f64)> = faults
            .iter()
            .map(|f| (f.server.as_str(), f.start_s / DAY_S, f.end_s / DAY_S))
            .collect();
        assert_eq!(got, [("a", 1.0, 2.0), ("b", 1.5, 4.0), ("a", 3.0, 4.0)]);
        assert_eq!(faults[0].class, "GPU");
    }

    #[test]
    fn bad_events_are_named() {
        let err = |text: String| parse(&text, "t.json").unwrap_err().to_string();
        assert_eq!(
            err(format!("[{}]", event("a", 1.0, "fault_end", "GPU Lost"))),
            "t.json: event 1: event_type: a ends `GPU Lost`, which never started"
        );
        assert_eq!(
            err(format!(
                "[{},{}]",
                event("a", 1.0, "fault_start", "X"),
                event("a", 2.0, "fault_start", "X")
            )),
            "t.json: event 2: event_type: a starts `X` again before it ended"
        );
        assert!(
            err(format!("[{}]", event("a", -1.0, "fault_start", "X")))
                .contains("event 1: event_time")
        );
        assert!(err(format!("[{}]", event("a", 1.0, "repaired", "X"))).contains("`repaired`"));
        assert!(err("{".into()).starts_with("t.json: not an InfiniteHBD trace:"));
    }
}
