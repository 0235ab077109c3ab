//! Agents in pods on a real control plane (etcd, kube-apiserver,
//! controller-manager, scheduler, kwok's GPU nodes): a Job labelled as
//! JobSet labels its pods runs PyTorch's DDP tutorial under `unicron agent`
//! on three nodes. There is no container runtime here, so each pod's
//! container is a process on this machine, started with the environment
//! its pod spec gives it (the downward API's node name, the labels file,
//! `JOB_COMPLETION_INDEX`); only the pod IP stands in as 127.0.0.1, the
//! network the processes share.
//!
//! One node dies (its heartbeat in Kubernetes stops, its agent and workers
//! are killed): the loss is found from the agents' heartbeats, the executor
//! isolates the node through the API server (cordon, unicron's taint, the
//! pod evicted), and the job resumes on the two nodes left from the agents'
//! memory and replicas, not from disk.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Running, need_torch, read, signal, stop_and_replay, up_no_sim, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use unicron_core::{Command as Cmd, CommandAction, FailureEvent, FailureKind};
use unicron_kubernetes::testing::{KubeCluster, KubeOptions, kubernetes_or_skip};
use unicron_kubernetes::view;

const PYTHON: &str = "/usr/bin/python3";
const CLUSTER: &str = "kubeagents";

/// The Job as JobSet would create its child: every pod labelled with the
/// JobSet's name and size, the downward API giving the node name and the
/// labels file.
fn tutorial_job() -> Job {
    serde_json::from_value(json!({
        "metadata": { "name": "tutorial", "namespace": "default",
            "annotations": { "unicron.io/agents": "true" } },
        "spec": {
            "parallelism": 3, "completions": 3, "completionMode": "Indexed", "backoffLimit": 100,
            "template": {
                "metadata": { "labels": {
                    "jobset.sigs.k8s.io/jobset-name": "tutorial",
                    "jobset.sigs.k8s.io/global-replicas": "3" } },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [ {
                        "name": "trainer", "image": "unicron:latest",
                        "command": ["unicron", "agent", "--", "python3", "multinode.py", "100000", "1000"],
                        "env": [
                            { "name": "NODE_NAME", "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } } },
                            { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }
                        ],
                        "resources": { "limits": { "nvidia.com/gpu": "8" } },
                        "volumeMounts": [ { "name": "podinfo", "mountPath": "/etc/podinfo" } ]
                    } ],
                    "volumes": [ { "name": "podinfo", "downwardAPI": { "items": [
                        { "path": "labels", "fieldRef": { "fieldPath": "metadata.labels" } } ] } } ]
                }
            }
        }
    }))
    .unwrap()
}

/// What the kubelet would give the container: each `valueFrom.fieldRef`
/// of the spec resolved against the pod, the labels file in the downward
/// API's format, and the Job's completion index.
fn container_env(pod: &Pod, labels_file: &Path) -> Vec<(String, String)> {
    let spec = pod.spec.as_ref().unwrap();
    let mut env = vec![
        (
            "KUBERNETES_SERVICE_HOST".to_string(),
            "127.0.0.1".to_string(),
        ),
        (
            "UNICRON_POD_LABELS".to_string(),
            labels_file.display().to_string(),
        ),
    ];
    for var in spec.containers[0].env.iter().flatten() {
        let path = var
            .value_from
            .as_ref()
            .and_then(|f| f.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        let value = match path {
            Some("spec.nodeName") => spec.node_name.clone().unwrap(),
            // The processes share this machine's loopback, not a pod network.
            Some("status.podIP") => "127.0.0.1".to_string(),
            _ => var.value.clone().unwrap_or_default(),
        };
        env.push((var.name.clone(), value));
    }
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let text: String = labels.iter().map(|(k, v)| format!("{k}={v:?}\n")).collect();
    std::fs::write(labels_file, text).unwrap();
    if let Some(index) = labels.get("batch.kubernetes.io/job-completion-index") {
        env.push(("JOB_COMPLETION_INDEX".to_string(), index.clone()));
    }
    env
}

fn resumed(dir: &Path, node: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(format!("{node}.out")))
        .ok()?
        .lines()
        .rev()
        .find(|l| l.starts_with("Resuming training from"))
        .map(str::to_string)
}

/// Processes whose environment carries `needle` (this node's workers).
fn pids_with_env(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
        })
        .collect()
}

#[test]
fn agents_in_pods_resume_from_memory_after_a_node_loss() {
    let Some(bin) = kubernetes_or_skip() else {
        return;
    };
    need_torch();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let options = KubeOptions {
        nodes: 3,
        ..KubeOptions::default()
    };
    let cluster = rt.block_on(KubeCluster::start(&bin, &options)).unwrap();
    let client = rt.block_on(cluster.admin_client()).unwrap().client;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kubeconfig = cluster.kubeconfig().display().to_string();
    let config = format!(
        "[metrics]\nenabled = false\n\n\
         [executor]\ncluster = \"{CLUSTER}\"\nbackend = {{ kind = \"kubernetes\", kubeconfig = {kubeconfig:?} }}\n\n\
         [kubernetes]\ncluster = \"{CLUSTER}\"\nkubeconfig = {kubeconfig:?}\nannounce_nodes = false\n"
    );
    std::fs::write(dir.join("unicron.toml"), config).unwrap();
    let (up, brokers) = up_no_sim(dir, Some(&dir.join("unicron.toml")));

    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    rt.block_on(jobs.create(&PostParams::default(), &tutorial_job()))
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let running = wait_for("three pods running", Duration::from_secs(60), || {
        let listed = rt
            .block_on(
                pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=tutorial")),
            )
            .ok()?;
        let running: Vec<Pod> = listed
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        (running.len() == 3).then_some(running)
    });

    // Each pod's container, as a process with the pod's environment.
    std::fs::write(dir.join("secret"), "a-cluster-secret-of-32-bytes-or-more\n").unwrap();
    std::fs::write(
        dir.join("agent.toml"),
        format!(
            "[metrics]\nenabled = false\n\n[agent]\ncluster = \"{CLUSTER}\"\nstop_grace_s = 2.0\nsnapshot_secret_file = {:?}\n",
            dir.join("secret").display().to_string()
        ),
    )
    .unwrap();
    let exe = env!("CARGO_BIN_EXE_unicron");
    let script = repo.join("examples/ddp-tutorial/multinode.py");
    let mut agents = Vec::new();
    let mut nodes = Vec::new();
    for pod in &running {
        let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
        let env = container_env(pod, &dir.join(format!("labels-{node}")));
        let log = |ext: &str| std::fs::File::create(dir.join(format!("{node}.{ext}"))).unwrap();
        let child = Command::new(exe)
            .arg("--config")
            .arg(dir.join("agent.toml"))
            .args([
                "agent",
                "--brokers",
                &brokers,
                "--min-nodes",
                "2",
                "--master-port",
                "31700",
                "--planner-key",
            ])
            .arg(dir.join("run/planner.pub"))
            .arg("--state-dir")
            .arg(dir.join(format!("state-{node}")))
            .arg("--")
            .args([PYTHON, &script.display().to_string(), "100000", "1000"])
            .envs(env)
            .env("PYTHONPATH", repo.join("clients/python"))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log("out"))
            .stderr(log("err"))
            .spawn()
            .unwrap();
        agents.push((node.clone(), Running(child)));
        nodes.push(node);
    }
    nodes.sort();
    // The job runs on the three pods' nodes, named as Kubernetes names them.
    let placed = wait_for(
        "the job placed on the pods' nodes",
        Duration::from_secs(120),
        || {
            read::<Cmd>(&brokers, "unicron.commands")
                .into_iter()
                .rfind(|c| c.rendezvous.is_some() && c.job.as_deref() == Some("tutorial"))
                .map(|c| c.nodes)
                .filter(|n| n.len() == 3)
        },
    );
    assert_eq!(placed, nodes);
    wait_for("every rank past epoch 20", Duration::from_secs(180), || {
        nodes
            .iter()
            .all(|n| {
                std::fs::read_to_string(dir.join(format!("{n}.out")))
                    .is_ok_and(|t| t.lines().filter(|l| l.contains("] Epoch ")).count() > 20)
            })
            .then_some(())
    });
    // No disk snapshot to fall back on.
    let _ = std::fs::remove_file(dir.join("snapshot.pt"));

    // The node dies: Kubernetes stops hearing it, its agent and workers die.
    let dead = nodes[2].clone();
    rt.block_on(cluster.stop_heartbeat(&dead)).unwrap();
    let (_, agent) = agents.iter().find(|(n, _)| *n == dead).unwrap();
    signal(agent.0.id() as i32, "KILL");
    for pid in pids_with_env(&format!("UNICRON_AGENT={CLUSTER}/{dead}")) {
        signal(pid, "KILL");
    }
    let lost = wait_for("the node loss", Duration::from_secs(60), || {
        read::<FailureEvent>(&brokers, "unicron.failures")
            .into_iter()
            .find(|f| f.node.as_deref() == Some(dead.as_str()))
    });
    assert_eq!(lost.kind, FailureKind::LostConnection, "{lost:?}");
    let nodes_api: Api<Node> = Api::all(client.clone());
    wait_for(
        "the dead node cordoned and tainted",
        Duration::from_secs(30),
        || {
            let node = rt.block_on(nodes_api.get(&dead)).ok()?;
            (view::unicron_taint(&node).is_some()
                && node.spec.as_ref()?.unschedulable == Some(true))
            .then_some(())
        },
    );
    let caused: Vec<Cmd> = wait_for("the loss's commands", Duration::from_secs(30), || {
        let caused: Vec<Cmd> = read::<Cmd>(&brokers, "unicron.commands")
            .into_iter()
            .filter(|c| c.causation.first() == Some(&lost.id))
            .collect();
        (caused.len() >= 2).then_some(caused)
    });
    assert_eq!(caused[0].action, CommandAction::IsolateNode);
    let restart = caused.last().unwrap();
    assert_eq!(
        restart.nodes,
        nodes[..2],
        "the job goes on on the two nodes left"
    );
    assert!(
        restart.snapshots.as_ref().and_then(|s| s.step).is_some(),
        "restored from memory or a replica, not from disk: {restart:?}"
    );
    let lines = wait_for("both ranks resumed", Duration::from_secs(90), || {
        let lines: Vec<String> = nodes[..2].iter().filter_map(|n| resumed(dir, n)).collect();
        (lines.len() == 2).then_some(lines)
    });
    for line in &lines {
        assert!(
            line.starts_with("Resuming training from memory"),
            "{lines:?}"
        );
    }
    println!(
        "node {dead} lost: isolated through the API server, the job resumed on two nodes: {lines:?}"
    );
    drop(agents);
    stop_and_replay(up, dir, Some(&dir.join("unicron.toml")));
}
