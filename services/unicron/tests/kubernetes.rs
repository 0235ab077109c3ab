//! unicron against a real Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, built by `./dev test` from the
//! Go module proxy) with five kwok GPU nodes: kwok stands in for the
//! kubelets (nodes Ready with leases, pods Running); the Job controller,
//! the node lifecycle controller and the scheduler are Kubernetes' own.
//! `unicron up --no-sim` runs broker, detector, planner, the executor with
//! the Kubernetes backend and kube-watch. Two training workloads (Jobs
//! labelled as JobSet's children are, asking for 8 GPUs a pod) are planned
//! from their annotations.
//!
//! Faults, each acted on through the API server: a GPU node condition
//! (NVSentinel-style), a container OOMKilled, a node cordoned by an
//! operator, a pod evicted by someone else, and a node whose heartbeat
//! stops (NotReady). The run ends with no pod on an isolated node and a
//! replay without divergence. With `UNICRON_KUBERNETES_JSON=FILE` the
//! measurements are written there (`tools/kubernetes/run.sh`).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::{now_ms, read, signal, up_no_sim, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use unicron_core::{
    ClusterEvent, ClusterEventKind, Command as Cmd, CommandAction, FailureEvent, FailureKind,
};
use unicron_kubernetes::testing::{KubeCluster, KubeOptions, kubernetes_or_skip};
use unicron_kubernetes::view;

const CLUSTER: &str = "kube";
/// The node lifecycle controller's grace in this test (Kubernetes' default
/// is 50 s).
const GRACE_S: u32 = 15;
/// What Kubernetes alone takes to evict a dead node's pods with its
/// defaults: `node-monitor-grace-period` (50 s) plus the default 300-s
/// `not-ready`/`unreachable` NoExecute tolerations.
const KUBERNETES_ALONE_NODE_LOSS_S: f64 = 350.0;

fn training_job(name: &str, pods: i32, weight: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "default",
            "annotations": { "unicron.io/weight": weight } },
        "spec": {
            "parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 1000,
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [ { "name": "trainer", "image": "trainer:fake",
                        "resources": { "limits": { "nvidia.com/gpu": "8" } } } ]
                }
            }
        }
    }))
    .unwrap()
}

struct Kube {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Kube {
    fn pods(&self, job: &str) -> Vec<Pod> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        self.rt
            .block_on(pods.list(
                &ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")),
            ))
            .unwrap()
            .items
    }

    fn running(&self, job: &str) -> Vec<Pod> {
        self.pods(job)
            .into_iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .collect()
    }

    fn node(&self, name: &str) -> Node {
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.rt.block_on(nodes.get(name)).unwrap()
    }

    fn patch_node(&self, name: &str, patch: serde_json::Value) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.rt
            .block_on(nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)))
            .unwrap();
    }

    fn patch_node_status(&self, name: &str, patch: serde_json::Value) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.rt
            .block_on(nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)))
            .unwrap();
    }
}

/// Waits until gpt runs on two pods and bert on one, and stays so for two
/// seconds: the previous fault's restarts are over.
fn settle(kube: &Kube) {
    wait_for("gpt and bert running", Duration::from_secs(90), || {
        let up = || kube.running("gpt").len() == 2 && kube.running("bert").len() == 1;
        if !up() {
            return None;
        }
        std::thread::sleep(Duration::from_secs(2));
        up().then_some(())
    });
}

fn node_of(pod: &Pod) -> String {
    pod.spec.as_ref().unwrap().node_name.clone().unwrap()
}

fn name_of(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap()
}

/// The first failure on `node` detected after `since_ms`, and when the
/// test saw it on the failures topic (wall clock: a failure's own
/// `detected_ms` is event time).
fn failure_on(brokers: &str, node: &str, since_ms: i64, within_s: u64) -> (FailureEvent, i64) {
    wait_for(
        &format!("a failure on {node}"),
        Duration::from_secs(within_s),
        || {
            read::<FailureEvent>(brokers, "unicron.failures")
                .into_iter()
                .find(|f| f.node.as_deref() == Some(node) && f.detected_ms >= since_ms)
                .map(|f| (f, now_ms()))
        },
    )
}

fn commands_of(brokers: &str, failure: &FailureEvent) -> Vec<Cmd> {
    read::<Cmd>(brokers, "unicron.commands")
        .into_iter()
        .filter(|c| c.causation.first() == Some(&failure.id))
        .collect()
}

fn seconds(from_ms: i64, to_ms: i64) -> f64 {
    (to_ms - from_ms) as f64 / 1000.0
}

#[test]
fn kubernetes_faults_are_acted_on_through_the_api_server() {
    let Some(bin) = kubernetes_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let options = KubeOptions {
        nodes: 5,
        node_monitor_grace_s: GRACE_S,
        ..KubeOptions::default()
    };
    let cluster = rt.block_on(KubeCluster::start(&bin, &options)).unwrap();
    println!(
        "control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok with {} GPU nodes, ready in {:.1} s",
        cluster.nodes().len(),
        cluster.started_in().as_secs_f64()
    );
    let client = rt.block_on(cluster.admin_client()).unwrap().client;
    let kube = Kube { rt, client };
    let tmp = tempfile::tempdir().unwrap();
    let (_scratch, dir) = if std::env::var_os("UNICRON_KEEP_TEST_DIR").is_some() {
        (None, tmp.keep())
    } else {
        let dir = tmp.path().to_path_buf();
        (Some(tmp), dir)
    };
    let dir = dir.as_path();
    eprintln!("test directory: {}", dir.display());
    let kubeconfig = cluster.kubeconfig().display().to_string();
    let config = format!(
        "[metrics]\nenabled = false\n\n\
         [planner.tuning]\nmax_isolations_per_hour = 3\n\n\
         [executor]\ncluster = \"{CLUSTER}\"\nbackend = {{ kind = \"kubernetes\", kubeconfig = {kubeconfig:?}, namespaces = [\"default\"] }}\n\n\
         [kubernetes]\ncluster = \"{CLUSTER}\"\nkubeconfig = {kubeconfig:?}\nnamespaces = [\"default\"]\n"
    );
    let config_path = dir.join("unicron.toml");
    std::fs::write(&config_path, config).unwrap();
    let (mut up, brokers) = up_no_sim(dir, Some(&config_path));

    let jobs: Api<Job> = Api::namespaced(kube.client.clone(), "default");
    for (name, pods, weight) in [("gpt", 2, "2"), ("bert", 1, "1")] {
        kube.rt
            .block_on(jobs.create(&PostParams::default(), &training_job(name, pods, weight)))
            .unwrap();
    }
    wait_for(
        "gpt and bert running and planned",
        Duration::from_secs(90),
        || {
            let submitted: BTreeSet<String> = read::<ClusterEvent>(&brokers, "unicron.cluster")
                .into_iter()
                .filter(|e| e.kind == ClusterEventKind::JobSubmitted)
                .filter_map(|e| e.job_id)
                .collect();
            let placed = read::<Cmd>(&brokers, "unicron.commands")
                .iter()
                .filter(|c| c.action == CommandAction::Resume)
                .count();
            (kube.running("gpt").len() == 2
                && kube.running("bert").len() == 1
                && submitted.len() == 2
                && placed >= 2)
                .then_some(())
        },
    );
    assert!(read::<FailureEvent>(&brokers, "unicron.failures").is_empty());
    // The detector at work before the first fault: a benign line, and its
    // group committed it (on the embedded broker a group's first
    // assignment can take seconds, which would be counted to the fault).
    let producer =
        unicron_bus::Producer::new(&unicron_codec::KafkaConfig::default(), &brokers).unwrap();
    let benign = unicron_core::LogRecord {
        cluster: CLUSTER.into(),
        node: cluster.nodes()[0].clone(),
        time_ms: now_ms(),
        source: "test".into(),
        job: None,
        rank: None,
        gpu: None,
        line: "warming up".into(),
        attributes: Default::default(),
    };
    kube.rt
        .block_on(producer.send(
            "unicron.logs",
            &benign.node,
            &benign,
            &unicron_codec::AvroCodec::default(),
        ))
        .unwrap();
    kube.rt.block_on(
        unicron_bus::testing::GroupProgress::new(
            &unicron_codec::KafkaConfig::default(),
            &brokers,
            "unicron-detector",
        )
        .committed_all_of(&["unicron.logs"], Duration::from_secs(60)),
    );
    let mut faults = Vec::new();
    let mut isolated: BTreeSet<String> = BTreeSet::new();

    // 1. A GPU node condition, as NVSentinel sets it, on bert's node.
    let bert_pod = kube.running("bert").remove(0);
    let node = node_of(&bert_pod);
    let t0 = now_ms();
    kube.patch_node_status(
        &node,
        json!({ "status": { "conditions": [ {
        "type": "GpuNvlinkWatch", "status": "True", "reason": "GpuNvlinkWatchIsNotHealthy",
        "message": "NVLink link 4 is down on GPU 2", "lastHeartbeatTime": null,
    } ] } }),
    );
    let (failure, seen) = failure_on(&brokers, &node, t0, 30);
    assert_eq!(failure.kind, FailureKind::NvlinkError, "{failure:?}");
    let acted = wait_for("the node tainted", Duration::from_secs(30), || {
        view::unicron_taint(&kube.node(&node)).map(|_| now_ms())
    });
    let evicted = wait_for(
        "bert's pod gone from the node",
        Duration::from_secs(30),
        || {
            kube.pods("bert")
                .iter()
                .all(|p| {
                    name_of(p) != name_of(&bert_pod) || p.metadata.deletion_timestamp.is_some()
                })
                .then(now_ms)
        },
    );
    assert_eq!(
        commands_of(&brokers, &failure)[0].action,
        CommandAction::IsolateNode
    );
    isolated.insert(node.clone());
    faults.push(json!({ "fault": "gpu_node_condition", "node": node, "detected": failure.kind.symbol(),
        "action": "isolate_node", "detect_s": seconds(t0, seen), "acted_s": seconds(t0, acted),
        "evicted_s": seconds(t0, evicted),
        "kubernetes_alone_s": null, "kubernetes_alone": "never: a node condition evicts nothing; NVSentinel-style remediation cordons in minutes" }));

    // 2. A container OOMKilled, as the kubelet reports it.
    settle(&kube);
    let victim = kube.running("gpt").remove(0);
    let node = node_of(&victim);
    let t0 = now_ms();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), "default");
    let oom = json!({ "status": { "containerStatuses": [ {
        "name": "trainer", "image": "trainer:fake", "imageID": "", "ready": false, "restartCount": 0,
        "state": { "terminated": { "exitCode": 137, "reason": "OOMKilled",
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z" } } } ] } });
    kube.rt
        .block_on(pods.patch_status(
            &name_of(&victim),
            &PatchParams::default(),
            &Patch::Merge(&oom),
        ))
        .unwrap();
    let (failure, seen) = failure_on(&brokers, &node, t0, 30);
    assert_eq!(failure.kind, FailureKind::OutOfMemory, "{failure:?}");
    assert_eq!(failure.job.as_deref(), Some("gpt"));
    let acted = wait_for("gpt's pods restarted", Duration::from_secs(30), || {
        kube.pods("gpt")
            .iter()
            .any(|p| {
                name_of(p) == name_of(&victim) && p.metadata.deletion_timestamp.is_some()
                    || !kube
                        .pods("gpt")
                        .iter()
                        .any(|p| name_of(p) == name_of(&victim))
            })
            .then(now_ms)
    });
    let action = commands_of(&brokers, &failure)[0].action;
    faults.push(json!({ "fault": "container_oomkilled", "node": node, "detected": failure.kind.symbol(),
        "action": action.symbol(), "detect_s": seconds(t0, seen), "acted_s": seconds(t0, acted),
        "evicted_s": null, "kubernetes_alone_s": null,
        "kubernetes_alone": "the Job controller replaces the one pod (backoffLimit); the job's other ranks are left in a broken collective" }));
    settle(&kube);

    // 3. An operator cordons a node: taken out of plans, nothing undone.
    settle(&kube);
    let free = cluster
        .nodes()
        .iter()
        .find(|n| !isolated.contains(*n))
        .unwrap()
        .clone();
    let t0 = now_ms();
    kube.patch_node(&free, json!({ "spec": { "unschedulable": true } }));
    let drained = wait_for("node_drained published", Duration::from_secs(30), || {
        read::<ClusterEvent>(&brokers, "unicron.cluster")
            .into_iter()
            .find(|e| e.kind == ClusterEventKind::NodeDrained && e.node.as_deref() == Some(&free))
    });
    assert_eq!(drained.reason.as_deref(), Some("kubernetes: cordoned"));
    faults.push(json!({ "fault": "node_cordoned_by_operator", "node": free, "detected": "node_drained",
        "action": "out of plans (no command)", "detect_s": seconds(t0, drained.time_ms), "acted_s": null,
        "evicted_s": null, "kubernetes_alone_s": null, "kubernetes_alone": "no pod placed there; running pods stay" }));
    assert_eq!(
        kube.node(&free).spec.unwrap().unschedulable,
        Some(true),
        "the operator's cordon stays"
    );
    kube.patch_node(&free, json!({ "spec": { "unschedulable": null } }));

    // 4. Someone else evicts bert's pod (gpt's exits within a minute of its
    //    OOM would be symptoms its root cause absorbs, as the detector does).
    settle(&kube);
    let victim = kube.running("bert").remove(0);
    let node = node_of(&victim);
    let t0 = now_ms();
    kube.rt
        .block_on(pods.evict(&name_of(&victim), &EvictParams::default()))
        .unwrap();
    let (failure, seen) = failure_on(&brokers, &node, t0, 30);
    assert_eq!(failure.kind, FailureKind::ExitedAbnormally, "{failure:?}");
    let action = wait_for("the eviction's command", Duration::from_secs(30), || {
        commands_of(&brokers, &failure).first().map(|c| c.action)
    });
    faults.push(json!({ "fault": "pod_evicted_by_someone_else", "node": node, "detected": failure.kind.symbol(),
        "action": action.symbol(), "detect_s": seconds(t0, seen), "acted_s": null,
        "evicted_s": null, "kubernetes_alone_s": null,
        "kubernetes_alone": "the Job controller replaces the one pod; the job's other ranks are left in a broken collective" }));

    // 5. A node's heartbeat stops: NotReady after the grace, then isolated,
    //    its pods evicted and force-deleted (its kubelet is gone).
    settle(&kube);
    let victim = kube.running("gpt").remove(0);
    let node = node_of(&victim);
    let t0 = now_ms();
    kube.rt.block_on(cluster.stop_heartbeat(&node)).unwrap();
    let (failure, seen) = failure_on(&brokers, &node, t0, u64::from(GRACE_S) + 60);
    assert_eq!(failure.kind, FailureKind::LostConnection, "{failure:?}");
    let acted = wait_for("the dead node tainted", Duration::from_secs(30), || {
        view::unicron_taint(&kube.node(&node)).map(|_| now_ms())
    });
    let evicted = wait_for("the dead node's pod gone", Duration::from_secs(30), || {
        (!kube
            .pods("gpt")
            .iter()
            .any(|p| name_of(p) == name_of(&victim)))
        .then(now_ms)
    });
    isolated.insert(node.clone());
    let detect_s = seconds(t0, seen);
    let cordon_after_detection_s = seconds(seen, acted);
    assert!(
        cordon_after_detection_s < 5.0,
        "node loss → cordon took {cordon_after_detection_s:.1} s after detection"
    );
    faults.push(json!({ "fault": "node_heartbeat_stopped", "node": node, "detected": failure.kind.symbol(),
        "action": "isolate_node", "detect_s": detect_s, "acted_s": seconds(t0, acted), "evicted_s": seconds(t0, evicted),
        "node_monitor_grace_s": GRACE_S,
        "kubernetes_alone_s": KUBERNETES_ALONE_NODE_LOSS_S,
        "kubernetes_alone": "computed from Kubernetes' defaults: node-monitor-grace-period 50 s + 300-s not-ready/unreachable tolerations, then the pods stay Terminating until force-deleted" }));

    // Nothing placed on an isolated node afterwards.
    wait_for(
        "gpt and bert running again",
        Duration::from_secs(90),
        || (kube.running("gpt").len() == 2 && kube.running("bert").len() == 1).then_some(()),
    );
    for job in ["gpt", "bert"] {
        for pod in kube.pods(job) {
            if pod.metadata.deletion_timestamp.is_none() {
                assert!(
                    !isolated.contains(&node_of(&pod)),
                    "{} placed on an isolated node",
                    name_of(&pod)
                );
            }
        }
    }

    // Stop, replay the archive: the same decisions.
    signal(up.0.id() as i32, "INT");
    let _ = up.0.wait();
    let replay = std::process::Command::new(env!("CARGO_BIN_EXE_unicron"))
        .arg("--config")
        .arg(&config_path)
        .args(["replay", "--from-archive"])
        .arg(dir.join("run"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&replay.stdout).into_owned();
    println!("{text}");
    assert!(
        replay.status.success(),
        "replay: {text}{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let count = |label: &str| -> i64 {
        let line = text
            .lines()
            .find(|l| l.starts_with("decisions compared:"))
            .unwrap();
        let at = line.find(label).unwrap() + label.len();
        line[at..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let report = json!({
        "control_plane": { "kubernetes": unicron_kubernetes::testing::KUBERNETES_VERSION, "nodes": cluster.nodes().len(),
            "ready_s": cluster.started_in().as_secs_f64(), "node_monitor_grace_s": GRACE_S },
        "faults": faults,
        "replay": { "decisions": count("compared:"), "diverged": count("diverged:") },
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report["replay"]["diverged"], 0);
    if let Some(path) = std::env::var_os("UNICRON_KUBERNETES_JSON") {
        std::fs::write(
            Path::new(&path),
            serde_json::to_string_pretty(&report).unwrap(),
        )
        .unwrap();
    }
}
