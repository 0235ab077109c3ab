//! The executor's Kubernetes actions against a real control plane (etcd,
//! kube-apiserver, controller-manager, scheduler, kwok's fake GPU nodes):
//! isolation cordons, taints and evicts through the API; giving back
//! undoes only unicron's own; workloads restart through their controller.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use unicron_kubernetes::testing::{KubeCluster, KubeOptions, kubernetes_or_skip};
use unicron_kubernetes::view::{self, ISOLATED_TAINT};
use unicron_kubernetes::{Evictions, Isolation, Kube};

/// One control plane at a time: the machine has two cores, and each picks
/// its free ports without holding them.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Job of `pods` pods asking for 8 GPUs each, as a JobSet's child would
/// be labelled: the real Job controller creates its pods, the scheduler
/// places them, kwok runs them.
fn training_job(name: &str, pods: i32) -> Job {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": "default" },
        "spec": {
            "parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 100,
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [ { "key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule" } ],
                    "containers": [ { "name": "trainer", "image": "trainer:fake",
                        "resources": { "limits": { "nvidia.com/gpu": "8" } } } ]
                }
            }
        }
    }))
    .unwrap()
}

async fn running_pods(kube: &Kube, job: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_cordons_taints_and_evicts_and_only_unicrons_is_undone() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(bin) = kubernetes_or_skip() else {
        return;
    };
    let cluster = KubeCluster::start(&bin, &KubeOptions::default())
        .await
        .unwrap();
    println!(
        "control plane with {} GPU nodes ready in {:.1} s",
        cluster.nodes().len(),
        cluster.started_in().as_secs_f64()
    );
    let kube = cluster.admin_client().await.unwrap();
    let jobs: Api<Job> = Api::namespaced(kube.client.clone(), "default");
    jobs.create(&PostParams::default(), &training_job("gpt", 3))
        .await
        .unwrap();
    let pods = wait_for(
        "three pods of gpt running",
        Duration::from_secs(60),
        || async {
            let pods = running_pods(&kube, "gpt").await;
            (pods.len() == 3).then_some(pods)
        },
    )
    .await;
    let victim = pods[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let evicted_pod = pods[0].metadata.name.clone().unwrap();

    // Isolation: cordon + unicron's taint + the job's pod evicted.
    let started = Instant::now();
    let done = kube
        .isolate(
            &Isolation {
                node: &victim,
                failure: "f:c1:unicron.logs:0:42",
                command_id: "c:1",
                job: Some("gpt"),
            },
            &Evictions::default(),
        )
        .await
        .unwrap();
    println!(
        "isolated in {:.2} s: {done}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        done.contains("cordoned and tainted unicron.io/isolated=f.c1.unicron.logs.0.42:NoSchedule"),
        "{done}"
    );
    assert!(done.contains(&evicted_pod), "{done}");
    let nodes: Api<Node> = Api::all(kube.client.clone());
    let node = nodes.get(&victim).await.unwrap();
    assert_eq!(node.spec.as_ref().unwrap().unschedulable, Some(true));
    assert!(view::unicron_taint(&node).is_some());
    // The Job controller replaces the evicted pod, never on the isolated node.
    let replaced = wait_for(
        "the evicted pod replaced",
        Duration::from_secs(60),
        || async {
            let pods = running_pods(&kube, "gpt").await;
            (pods.len() == 3
                && pods
                    .iter()
                    .all(|p| p.metadata.name.as_deref() != Some(&evicted_pod)))
            .then_some(pods)
        },
    )
    .await;
    for pod in &replaced {
        assert_ne!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some(victim.as_str())
        );
    }
    // Twice is once.
    let again = kube
        .isolate(
            &Isolation {
                node: &victim,
                failure: "f:c1:unicron.logs:0:42",
                command_id: "c:1",
                job: Some("gpt"),
            },
            &Evictions::default(),
        )
        .await
        .unwrap();
    assert!(
        again.starts_with(&format!("{victim} already isolated by unicron")),
        "{again}"
    );

    // A node an operator cordoned and tainted stays theirs.
    let other = cluster
        .nodes()
        .iter()
        .find(|n| **n != victim)
        .unwrap()
        .clone();
    let theirs = serde_json::json!({ "spec": { "unschedulable": true,
        "taints": [ { "key": "ops.example/repair", "value": "fan", "effect": "NoSchedule" } ] } });
    nodes
        .patch(&other, &PatchParams::default(), &Patch::Merge(&theirs))
        .await
        .unwrap();
    let left = kube
        .isolate(
            &Isolation {
                node: &other,
                failure: "f:2",
                command_id: "c:2",
                job: Some("gpt"),
            },
            &Evictions::default(),
        )
        .await
        .unwrap();
    assert!(
        left.starts_with(&format!(
            "left as it is: {other} is cordoned and tainted ops.example/repair=fan:NoSchedule"
        )),
        "{left}"
    );
    let given = kube.give_back(&other).await.unwrap();
    assert!(given.starts_with("left as it is"), "{given}");
    let node = nodes.get(&other).await.unwrap();
    assert_eq!(
        node.spec.as_ref().unwrap().unschedulable,
        Some(true),
        "the operator's cordon stays"
    );

    // Giving back unicron's node: uncordoned, taint gone, nothing else.
    let given = kube.give_back(&victim).await.unwrap();
    assert_eq!(
        given,
        format!("{victim} uncordoned, {ISOLATED_TAINT} removed")
    );
    let node = nodes.get(&victim).await.unwrap();
    assert!(view::unicron_taint(&node).is_none());
    assert_ne!(node.spec.as_ref().unwrap().unschedulable, Some(true));
    assert!(
        kube.give_back("node-404")
            .await
            .unwrap_err()
            .to_string()
            .contains("get node node-404: 404")
    );
}

/// deploy/kubernetes/rbac.yaml and deploy/kubernetes-training/rbac.yaml,
/// server-side applied: namespaces first.
async fn apply_rbac(kube: &Kube) {
    use kube::api::DynamicObject;
    use kube::discovery::Discovery;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(kube.client.clone());
    for ns in ["unicron", "training"] {
        let object =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": ns } })).unwrap();
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    let discovery = Discovery::new(kube.client.clone()).run().await.unwrap();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");
    let text = ["kubernetes/rbac.yaml", "kubernetes-training/rbac.yaml"]
        .map(|file| std::fs::read_to_string(format!("{root}/{file}")).unwrap())
        .join("\n---\n");
    for doc in text.split("\n---\n") {
        let value: serde_json::Value = yaml_serde::from_str(doc).unwrap();
        let object: DynamicObject = serde_json::from_value(value.clone()).unwrap();
        let types = object.types.clone().unwrap();
        let gvk = kube::api::GroupVersionKind::try_from(&types).unwrap();
        let (resource, caps) = discovery.resolve_gvk(&gvk).unwrap();
        let name = object.metadata.name.clone().unwrap();
        let api: Api<DynamicObject> = match (&object.metadata.namespace, caps.scope) {
            (Some(ns), kube::discovery::Scope::Namespaced) => {
                Api::namespaced_with(kube.client.clone(), ns, &resource)
            }
            _ => Api::all_with(kube.client.clone(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply("unicron-test").force(),
            &Patch::Apply(&value),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", types.kind));
    }
}

/// A kubeconfig for a service account of deploy/kubernetes/rbac.yaml, with
/// a token from the TokenRequest API.
async fn service_account(
    cluster: &KubeCluster,
    kube: &Kube,
    name: &str,
    namespaces: &[&str],
) -> Kube {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(kube.client.clone(), "unicron");
    let request: TokenRequest = serde_json::from_value(
        serde_json::json!({ "spec": { "audiences": [], "expirationSeconds": 3600 } }),
    )
    .unwrap();
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let kubeconfig = cluster
        .kubeconfig_with_token(name, &token.unwrap())
        .unwrap();
    let mut settings = cluster.api_settings(&kubeconfig);
    settings.namespaces = namespaces.iter().map(|n| n.to_string()).collect();
    Kube::connect(&settings).await.unwrap()
}

/// `kubectl auth can-i VERB RESOURCE -n NAMESPACE` as `kube`.
async fn can_i(
    kube: &Kube,
    verb: &str,
    group: &str,
    resource: &str,
    subresource: &str,
    namespace: Option<&str>,
) -> bool {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(kube.client.clone());
    let review: SelfSubjectAccessReview = serde_json::from_value(serde_json::json!({ "spec": { "resourceAttributes": {
        "verb": verb, "group": group, "resource": resource, "subresource": subresource, "namespace": namespace.unwrap_or("") } } }))
    .unwrap();
    reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_identities_may_do_their_work_and_nothing_more() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(bin) = kubernetes_or_skip() else {
        return;
    };
    let mut cluster = KubeCluster::start(
        &bin,
        &KubeOptions {
            nodes: 2,
            ..KubeOptions::default()
        },
    )
    .await
    .unwrap();
    let admin = cluster.admin_client().await.unwrap();
    apply_rbac(&admin).await;
    let executor = service_account(
        &cluster,
        &admin,
        "unicron-executor-kubernetes",
        &["training"],
    )
    .await;
    let watcher = service_account(&cluster, &admin, "unicron-kube-watch", &["training"]).await;

    // What each may do, and what it may not (kubectl auth can-i).
    let t = Some("training");
    let d = Some("default");
    for (who, kube, verb, group, resource, sub, ns, allowed) in [
        ("executor", &executor, "patch", "", "nodes", "", None, true),
        (
            "executor", &executor, "create", "", "pods", "eviction", t, true,
        ),
        (
            "executor",
            &executor,
            "patch",
            "jobset.x-k8s.io",
            "jobsets",
            "",
            t,
            true,
        ),
        (
            "executor", &executor, "delete", "", "nodes", "", None, false,
        ),
        (
            "executor", &executor, "create", "", "pods", "eviction", d, false,
        ),
        (
            "executor", &executor, "patch", "batch", "jobs", "", d, false,
        ),
        (
            "executor", &executor, "create", "batch", "jobs", "", t, false,
        ),
        ("executor", &executor, "get", "", "secrets", "", t, false),
        ("kube-watch", &watcher, "watch", "", "nodes", "", None, true),
        ("kube-watch", &watcher, "watch", "", "pods", "", t, true),
        (
            "kube-watch",
            &watcher,
            "patch",
            "",
            "nodes",
            "",
            None,
            false,
        ),
        ("kube-watch", &watcher, "watch", "", "pods", "", d, false),
        ("kube-watch", &watcher, "delete", "", "pods", "", t, false),
    ] {
        assert_eq!(
            can_i(kube, verb, group, resource, sub, ns).await,
            allowed,
            "{who} {verb} {group}/{resource}/{sub} in {ns:?}"
        );
    }

    // The executor's identity isolates and gives back a node.
    let node = cluster.nodes()[0].clone();
    let isolation = Isolation {
        node: &node,
        failure: "f:1",
        command_id: "c:1",
        job: None,
    };
    let done = executor
        .isolate(&isolation, &Evictions::default())
        .await
        .unwrap();
    assert!(done.contains("cordoned and tainted"), "{done}");
    executor.give_back(&node).await.unwrap();
    // Outside its namespaces it is refused, and the error says what: final.
    let mut elsewhere = executor.clone();
    elsewhere.namespaces = vec!["default".into()];
    let refused = elsewhere
        .workload("gpt", "nvidia.com/gpu")
        .await
        .unwrap_err();
    assert!(!refused.passing());
    assert!(
        refused
            .to_string()
            .starts_with("get JobSet default/gpt: forbidden"),
        "{refused}"
    );

    // Without an API server: a passing error (the executor retries it),
    // never a success.
    cluster.kill("kube-apiserver");
    let away = executor.give_back(&node).await.unwrap_err();
    assert!(away.passing(), "{away}");
    assert!(
        away.to_string().starts_with(&format!("get node {node}: ")),
        "{away}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_storm_leaves_a_node_whole_isolated_or_untouched() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(bin) = kubernetes_or_skip() else {
        return;
    };
    let cluster = KubeCluster::start(
        &bin,
        &KubeOptions {
            nodes: 1,
            ..KubeOptions::default()
        },
    )
    .await
    .unwrap();
    let kube = cluster.admin_client().await.unwrap();
    let node = cluster.nodes()[0].clone();
    // Someone else rewrites the node's labels as fast as the API server
    // takes it: every write moves its resourceVersion.
    let storm = {
        let nodes: Api<Node> = Api::all(kube.client.clone());
        let node = node.clone();
        tokio::spawn(async move {
            for i in 0..400u32 {
                let patch =
                    serde_json::json!({ "metadata": { "labels": { "storm": i.to_string() } } });
                let _ = nodes
                    .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        })
    };
    let mut outcomes = Vec::new();
    for i in 0..5 {
        let failure = format!("f:{i}");
        let command = format!("c:{i}");
        let done = kube
            .isolate(
                &Isolation {
                    node: &node,
                    failure: &failure,
                    command_id: &command,
                    job: None,
                },
                &Evictions::default(),
            )
            .await;
        let seen = Api::<Node>::all(kube.client.clone())
            .get(&node)
            .await
            .unwrap();
        let cordoned = seen.spec.as_ref().unwrap().unschedulable == Some(true);
        let tainted = view::unicron_taint(&seen).is_some();
        // One conditional patch: both or neither, never half.
        assert_eq!(cordoned, tainted, "{done:?}");
        match &done {
            Ok(_) => assert!(tainted, "{done:?}"),
            // Retried by the executor's backoff.
            Err(e) => assert!(e.code() == Some(409) && e.passing(), "{e}"),
        }
        outcomes.push(done.is_ok());
        if tainted {
            let back = kube.give_back(&node).await;
            let seen = Api::<Node>::all(kube.client.clone())
                .get(&node)
                .await
                .unwrap();
            assert_eq!(
                back.is_ok(),
                view::unicron_taint(&seen).is_none(),
                "{back:?}"
            );
        }
    }
    storm.abort();
    println!(
        "isolations under a conflict storm: {outcomes:?} (true: done, false: 409 after 5 fresh reads)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobsets_and_pytorchjobs_are_read_and_suspended_through_their_crds() {
    use kube::api::DynamicObject;
    use unicron_kubernetes::workload::WorkloadKind;
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(bin) = kubernetes_or_skip() else {
        return;
    };
    let cluster = KubeCluster::start(
        &bin,
        &KubeOptions {
            nodes: 1,
            ..KubeOptions::default()
        },
    )
    .await
    .unwrap();
    let kinds = cluster.install_crds().await.unwrap();
    assert_eq!(kinds, ["JobSet", "PyTorchJob"]);
    let kube = cluster.admin_client().await.unwrap();
    let gpus = serde_json::json!({ "limits": { "nvidia.com/gpu": "8" } });
    let pod = |name: &str| serde_json::json!({ "spec": { "containers": [ { "name": name, "image": "trainer:fake", "resources": gpus } ] } });
    let jobset = serde_json::json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": { "name": "gpt", "namespace": "default", "annotations": { "unicron.io/weight": "3" } },
        "spec": { "replicatedJobs": [ { "name": "workers", "replicas": 2,
            "template": { "spec": { "parallelism": 1, "completions": 1, "template": pod("trainer") } } } ] }
    });
    let pytorchjob = serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": { "name": "llama", "namespace": "default" },
        "spec": { "pytorchReplicaSpecs": {
            "Master": { "replicas": 1, "restartPolicy": "OnFailure", "template": pod("pytorch") },
            "Worker": { "replicas": 3, "restartPolicy": "OnFailure", "template": pod("pytorch") } } }
    });
    for (kind, object) in [
        (WorkloadKind::JobSet, jobset),
        (WorkloadKind::PyTorchJob, pytorchjob),
    ] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(kube.client.clone(), "default", &kind.api_resource());
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let gpt = kube
        .workload("gpt", "nvidia.com/gpu")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gpt.kind, WorkloadKind::JobSet);
    let spec = gpt.spec.clone().unwrap();
    assert_eq!((spec.max_gpus, spec.weight), (16, 3.0));
    let llama = kube
        .workload("llama", "nvidia.com/gpu")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(llama.kind, WorkloadKind::PyTorchJob);
    assert_eq!(llama.spec.clone().unwrap().max_gpus, 32);
    // Suspended where each kind keeps its flag, as the CRD's schema takes it.
    for view in [&gpt, &llama] {
        kube.suspend(view, true).await.unwrap();
        let again = kube
            .workload(&view.name, "nvidia.com/gpu")
            .await
            .unwrap()
            .unwrap();
        assert!(again.suspended, "{} not suspended", view.name);
    }
}
