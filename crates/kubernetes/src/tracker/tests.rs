use super::*;

fn node(name: &str, ready: &str, extra: serde_json::Value) -> Node {
    let mut conditions =
        vec![serde_json::json!({ "type": "Ready", "status": ready, "reason": "KubeletReady" })];
    if let Some(more) = extra.get("conditions").and_then(|c| c.as_array()) {
        conditions.extend(more.iter().cloned());
    }
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": extra.get("spec").cloned().unwrap_or(serde_json::json!({})),
        "status": { "conditions": conditions, "allocatable": { "nvidia.com/gpu": "8" } },
    }))
    .unwrap()
}

fn pod(uid: &str, annotations: serde_json::Value, deleting: bool, terminated: Option<&str>) -> Pod {
    let state = match terminated {
        Some(reason) => {
            serde_json::json!({ "terminated": { "exitCode": 137, "reason": reason } })
        }
        None => serde_json::json!({ "running": {} }),
    };
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": format!("gpt-{uid}"), "namespace": "train", "uid": uid,
            "labels": { "jobset.sigs.k8s.io/jobset-name": "gpt" }, "annotations": annotations,
            "deletionTimestamp": if deleting { serde_json::json!("2026-01-01T00:00:00Z") } else { serde_json::Value::Null } },
        "spec": { "nodeName": "n1", "containers": [ { "name": "trainer" } ] },
        "status": {
            "conditions": if deleting { serde_json::json!([ { "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting" } ]) } else { serde_json::json!([]) },
            "containerStatuses": [ { "name": "trainer", "image": "x", "imageID": "", "ready": true, "restartCount": 0, "state": state } ]
        },
    }))
    .unwrap()
}

fn tracker() -> Tracker {
    Tracker::new(WatchSettings {
        cluster: "c".into(),
        ..WatchSettings::default()
    })
}

fn listed<K>(
    t: &mut Tracker,
    objects: Vec<K>,
    mut apply: impl FnMut(&mut Tracker, Event<K>) -> Vec<Record>,
) -> Vec<Record> {
    let mut out = apply(t, Event::Init);
    for object in objects {
        out.extend(apply(t, Event::InitApply(object)));
    }
    out.extend(apply(t, Event::InitDone));
    out
}

fn lines(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| match r {
            Record::Log(l) => l.line.clone(),
            Record::Cluster(e) => {
                format!("{:?} {:?}", e.kind, e.node.as_ref().or(e.job_id.as_ref()))
            }
        })
        .collect()
}

#[test]
fn nodes_are_announced_once_and_not_ready_is_node_loss_for_the_detector() {
    let mut t = tracker();
    let first = listed(
        &mut t,
        vec![
            node("n1", "True", serde_json::json!({})),
            node("n2", "True", serde_json::json!({})),
        ],
        |t, e| t.node(e, 1),
    );
    assert_eq!(
        lines(&first),
        ["NodeJoined Some(\"n1\")", "NodeJoined Some(\"n2\")"]
    );
    // A relist of the same view says nothing again.
    let again = listed(
        &mut t,
        vec![
            node("n1", "True", serde_json::json!({})),
            node("n2", "True", serde_json::json!({})),
        ],
        |t, e| t.node(e, 2),
    );
    assert!(again.is_empty(), "{again:?}");
    let lost = t.node(
        Event::Apply(node("n2", "Unknown", serde_json::json!({}))),
        3,
    );
    assert_eq!(lost.len(), 1);
    let Record::Log(line) = &lost[0] else {
        panic!("{lost:?}")
    };
    assert!(
        line.line
            .starts_with("kubernetes: node n2 NodeNotReady: Ready=Unknown"),
        "{}",
        line.line
    );
    // Cordoned by an operator: node_drained; unicron's own taint: nothing.
    let cordoned = t.node(
        Event::Apply(node(
            "n1",
            "True",
            serde_json::json!({ "spec": { "unschedulable": true } }),
        )),
        4,
    );
    assert_eq!(lines(&cordoned), ["NodeDrained Some(\"n1\")"]);
    let ours = serde_json::json!({ "spec": { "unschedulable": true, "taints": [ { "key": "unicron.io/isolated", "value": "f", "effect": "NoSchedule" } ] } });
    assert_eq!(
        lines(&t.node(Event::Apply(node("n2", "True", ours)), 5)),
        Vec::<String>::new()
    );
    // A GPU condition turning True is one line, once.
    let gpu = serde_json::json!({ "conditions": [ { "type": "GpuMemWatch", "status": "True", "reason": "R", "message": "DBE" } ] });
    let fault = t.node(Event::Apply(node("n1", "True", gpu.clone())), 6);
    assert_eq!(
        lines(&fault),
        [
            "NodeRepaired Some(\"n1\")",
            "kubernetes: node n1 condition GpuMemWatch=True (R): DBE"
        ]
    );
    assert!(t.node(Event::Apply(node("n1", "True", gpu)), 7).is_empty());
}

#[test]
fn pod_faults_are_news_once_and_unicrons_own_evictions_are_not() {
    let mut t = tracker();
    // Terminated before the first listing: history.
    let first = listed(
        &mut t,
        vec![pod("a", serde_json::json!({}), false, Some("OOMKilled"))],
        |t, e| t.pod("train", e, 1),
    );
    assert!(first.is_empty(), "{first:?}");
    let oom = t.pod(
        "train",
        Event::Apply(pod("b", serde_json::json!({}), false, Some("OOMKilled"))),
        2,
    );
    assert_eq!(
        lines(&oom),
        ["kubernetes: container trainer of pod train/gpt-b was OOMKilled (exit code 137)"]
    );
    let Record::Log(log) = &oom[0] else { panic!() };
    assert_eq!((log.job.as_deref(), log.node.as_str()), (Some("gpt"), "n1"));
    assert!(
        t.pod(
            "train",
            Event::Apply(pod("b", serde_json::json!({}), false, Some("OOMKilled"))),
            3
        )
        .is_empty()
    );
    // Evicted by someone: news; by unicron (annotated): not.
    let theirs = t.pod(
        "train",
        Event::Apply(pod("c", serde_json::json!({}), true, None)),
        4,
    );
    assert_eq!(theirs.len(), 1);
    assert!(
        lines(&theirs)[0].contains("was evicted (EvictionByEvictionAPI"),
        "{theirs:?}"
    );
    let ours = t.pod(
        "train",
        Event::Apply(pod(
            "d",
            serde_json::json!({ "unicron.io/stopped-by": "c:1" }),
            true,
            None,
        )),
        5,
    );
    assert!(ours.is_empty(), "{ours:?}");
    // A pod being deleted reports no container exit.
    let deleting = t.pod(
        "train",
        Event::Apply(pod(
            "e",
            serde_json::json!({ "unicron.io/stopped-by": "c:2" }),
            true,
            Some("Error"),
        )),
        6,
    );
    assert!(deleting.is_empty(), "{deleting:?}");
}
