//! A real Kubernetes control plane for tests and benchmarks: etcd,
//! kube-apiserver (TLS, RBAC, client certificates and a token user),
//! kube-controller-manager, kube-scheduler and kwok with fake GPU nodes, on
//! loopback, from the binaries `./dev test` builds with Go
//! (tools/kubernetes/go.mod). kwok stands in for the kubelets: its nodes go
//! Ready and renew their leases, its pods go Running, and the real
//! controllers and scheduler do the rest. Killed when the handle drops.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use crate::client::{ApiSettings, Kube};

mod pki;
pub use pki::unreachable_api;
use pki::{free_port, kubeconfig, openssl, signed};

/// The Kubernetes release tools/kubernetes/go.mod pins.
pub const KUBERNETES_VERSION: &str = "1.37.2";

/// The label kwok's nodes carry while kwok keeps them alive; removing it
/// stops their heartbeat (kwok lets go of the node, its lease expires and
/// the node lifecycle controller marks it NotReady).
pub const KWOK_MANAGED: &str = "unicron.test/kwok";

/// How long a starting control plane may take on a loaded 2-core machine
/// (about 5 s on an idle one).
const READY_WITHIN: Duration = Duration::from_secs(120);

/// Something the control plane could not do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ControlPlaneError(String);

fn fail(what: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError(what.into())
}

/// The directory of the control plane's binaries: `$UNICRON_KUBERNETES_BIN`,
/// else where `./dev test` builds them (`$UNICRON_CACHE`,
/// `~/.cache/unicron`, CI's cache).
pub fn kubernetes_bin() -> Option<PathBuf> {
    let cached =
        |dir: Option<PathBuf>| dir.map(|d| d.join(format!("kubernetes-{KUBERNETES_VERSION}/bin")));
    [
        std::env::var_os("UNICRON_KUBERNETES_BIN").map(PathBuf::from),
        cached(std::env::var_os("UNICRON_CACHE").map(PathBuf::from)),
        cached(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/unicron"))),
        cached(Some(PathBuf::from("/var/cache/unicron-tools"))),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.join("kube-apiserver").is_file() && p.join("kwok").is_file())
}

/// [`kubernetes_bin`], or `None` to skip the test, which is allowed only
/// outside CI: under CI missing binaries fail it.
pub fn kubernetes_or_skip() -> Option<PathBuf> {
    let found = kubernetes_bin();
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but the Kubernetes control plane is missing: ./dev test builds it"
        );
        eprintln!(
            "skipped: no Kubernetes control plane (./dev setup test builds it; or set UNICRON_KUBERNETES_BIN)"
        );
    }
    found
}

/// The shape of a test cluster.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// Fake nodes, `node-1` ... `node-N`.
    pub nodes: usize,
    pub gpus_per_node: u32,
    /// The node lifecycle controller's grace before a silent node is
    /// NotReady (Kubernetes' default is 50 s; tests use less).
    pub node_monitor_grace_s: u32,
    /// The nodes' lease duration (kwok renews at a quarter of it).
    pub lease_s: u32,
}

impl Default for KubeOptions {
    fn default() -> Self {
        KubeOptions {
            nodes: 4,
            gpus_per_node: 8,
            node_monitor_grace_s: 20,
            lease_s: 8,
        }
    }
}

/// A running control plane.
pub struct KubeCluster {
    dir: PathBuf,
    bin: PathBuf,
    /// Components in start order; killed in reverse.
    running: Vec<(&'static str, Child)>,
    server: String,
    admin: PathBuf,
    ca: PathBuf,
    started_in: Duration,
    nodes: Vec<String>,
    _scratch: Option<tempfile::TempDir>,
}

impl KubeCluster {
    /// Starts a control plane with `options.nodes` Ready GPU nodes, in a
    /// scratch directory (kept with `UNICRON_KEEP_TEST_DIR`, to read the
    /// components' logs).
    pub async fn start(
        bin: &Path,
        options: &KubeOptions,
    ) -> Result<KubeCluster, ControlPlaneError> {
        let started = Instant::now();
        let scratch = tempfile::Builder::new()
            .prefix("unicron-kube-")
            .tempdir()
            .map_err(|e| fail(e.to_string()))?;
        let dir = scratch.path().to_path_buf();
        let scratch = if std::env::var_os("UNICRON_KEEP_TEST_DIR").is_some() {
            eprintln!("control plane directory: {}", dir.display());
            let _ = scratch.keep();
            None
        } else {
            Some(scratch)
        };
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).map_err(|e| fail(e.to_string()))?;
        openssl(
            &pki,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=unicron-test-ca",
            ],
        )?;
        signed(
            &pki,
            "apiserver",
            "/CN=kube-apiserver",
            Some("IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc,IP:10.96.0.1"),
        )?;
        signed(
            &pki,
            "admin",
            "/O=system:masters/CN=unicron-test-admin",
            None,
        )?;
        openssl(&pki, &["genrsa", "-out", "sa.key", "2048"])?;
        openssl(&pki, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
        // A static token user with no rights of its own, for RBAC tests.
        std::fs::write(
            pki.join("tokens.csv"),
            "unicron-test-token,unicron-test-user,1001\n",
        )
        .map_err(|e| fail(e.to_string()))?;

        let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
        let server = format!("https://127.0.0.1:{api_port}");
        let mut cluster = KubeCluster {
            dir: dir.clone(),
            bin: bin.to_path_buf(),
            running: Vec::new(),
            server: server.clone(),
            admin: dir.join("admin.kubeconfig"),
            ca: pki.join("ca.crt"),
            started_in: Duration::ZERO,
            nodes: (1..=options.nodes).map(|i| format!("node-{i}")).collect(),
            _scratch: scratch,
        };
        let p = |name: &str| pki.join(name).display().to_string();
        std::fs::write(
            &cluster.admin,
            kubeconfig(
                &server,
                &p("ca.crt"),
                &format!(
                    "client-certificate: {}\n    client-key: {}",
                    p("admin.crt"),
                    p("admin.key")
                ),
            ),
        )
        .map_err(|e| fail(e.to_string()))?;

        cluster.spawn(
            bin,
            "etcd",
            "etcd",
            &[
                "--name=default".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        )?;
        cluster.spawn(
            bin,
            "kube-apiserver",
            "kube-apiserver",
            &[
                format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                // No endpoints of its own to reconcile on loopback.
                "--endpoint-reconciler-type=none".into(),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                format!("--client-ca-file={}", p("ca.crt")),
                format!("--token-auth-file={}", p("tokens.csv")),
                format!("--service-account-key-file={}", p("sa.pub")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--authorization-mode=Node,RBAC".into(),
                // No kubelet mounts tokens: pods need no service account object.
                "--disable-admission-plugins=ServiceAccount".into(),
            ],
        )?;
        let kube = cluster.admin_client().await?;
        let namespaces: Api<Namespace> = Api::all(kube.client.clone());
        cluster
            .wait("the API server's default namespace", || async {
                namespaces
                    .get_opt("default")
                    .await
                    .ok()
                    .flatten()
                    .map(|_| ())
            })
            .await?;
        // RBAC's bootstrap policy (what every authenticated user may do).
        let bindings: Api<ClusterRoleBinding> = Api::all(kube.client.clone());
        cluster
            .wait("RBAC's bootstrap policy", || async {
                bindings
                    .get_opt("system:basic-user")
                    .await
                    .ok()
                    .flatten()
                    .map(|_| ())
            })
            .await?;
        let admin = cluster.admin.display().to_string();
        cluster.spawn(
            bin,
            "kube-controller-manager",
            "kube-controller-manager",
            &[
                format!("--kubeconfig={admin}"),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()?),
                format!("--service-account-private-key-file={}", p("sa.key")),
                format!("--root-ca-file={}", p("ca.crt")),
                "--use-service-account-credentials=false".into(),
                format!(
                    "--node-monitor-grace-period={}s",
                    options.node_monitor_grace_s
                ),
                "--node-monitor-period=1s".into(),
            ],
        )?;
        cluster.spawn(
            bin,
            "kube-scheduler",
            "kube-scheduler",
            &[
                format!("--kubeconfig={admin}"),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()?),
            ],
        )?;
        // kwok's own stages (./dev copies them from its module): nodes go
        // Ready and renew leases, pods go Running, finish, and are deleted.
        let mut stages: Vec<String> = std::fs::read_dir(bin.join("stages"))
            .map_err(|e| fail(format!("{}: {e}", bin.join("stages").display())))?
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .map(|p| format!("--config={}", p.display()))
            .collect();
        stages.sort();
        let mut kwok = vec![format!("--kubeconfig={admin}")];
        kwok.extend(stages);
        kwok.extend([
            format!("--manage-nodes-with-label-selector={KWOK_MANAGED}=managed"),
            format!("--node-lease-duration-seconds={}", options.lease_s),
            "--node-ip=127.0.0.1".into(),
            format!("--server-address=127.0.0.1:{}", free_port()?),
        ]);
        cluster.spawn(bin, "kwok", "kwok", &kwok)?;
        let nodes: Api<Node> = Api::all(kube.client.clone());
        for name in cluster.nodes.clone() {
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name,
                    "labels": { KWOK_MANAGED: "managed", "kubernetes.io/hostname": name, "type": "kwok", "nvidia.com/gpu.present": "true" },
                    "annotations": { "node.alpha.kubernetes.io/ttl": "0" },
                },
                "status": {
                    "capacity": { "cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": options.gpus_per_node.to_string() },
                    "allocatable": { "cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": options.gpus_per_node.to_string() },
                },
            }))
            .map_err(|e| fail(e.to_string()))?;
            nodes
                .create(&PostParams::default(), &node)
                .await
                .map_err(|e| fail(format!("create node {name}: {e}")))?;
        }
        let want = cluster.nodes.len();
        cluster
            .wait("every fake node Ready", || async {
                let listed = nodes.list(&ListParams::default()).await.ok()?;
                (listed
                    .items
                    .iter()
                    .filter(|n| crate::view::is_ready(n))
                    .count()
                    == want)
                    .then_some(())
            })
            .await?;
        cluster.started_in = started.elapsed();
        Ok(cluster)
    }

    fn spawn(
        &mut self,
        bin: &Path,
        name: &'static str,
        program: &str,
        args: &[String],
    ) -> Result<(), ControlPlaneError> {
        let log = |suffix: &str| {
            std::fs::File::create(self.dir.join(format!("{name}.{suffix}")))
                .map_err(|e| fail(e.to_string()))
        };
        let child = Command::new(bin.join(program))
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log("out")?)
            .stderr(log("err")?)
            .spawn()
            .map_err(|e| fail(format!("{name}: {e}")))?;
        self.running.push((name, child));
        Ok(())
    }

    /// Waits for `check` to give a value, failing with the components' logs
    /// when one of them died or it took too long.
    async fn wait<T, F, Fut>(&mut self, what: &str, mut check: F) -> Result<T, ControlPlaneError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(value) = check().await {
                return Ok(value);
            }
            let dead = self
                .running
                .iter_mut()
                .find_map(|(name, child)| Some((*name, child.try_wait().ok()??)));
            if let Some((name, status)) = dead {
                return Err(fail(format!(
                    "{name} exited ({status}) waiting for {what}:\n{}",
                    self.log_tail(name)
                )));
            }
            if Instant::now() > deadline {
                return Err(fail(format!("no {what} within {READY_WITHIN:?}")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines a component wrote to its stderr.
    pub fn log_tail(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{name}.err"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// A kubeconfig with the cluster's admin (system:masters) certificate.
    pub fn kubeconfig(&self) -> &Path {
        &self.admin
    }

    /// A kubeconfig authenticating with `token` (a service account's, or
    /// the static test user's `unicron-test-token`).
    pub fn kubeconfig_with_token(
        &self,
        name: &str,
        token: &str,
    ) -> Result<PathBuf, ControlPlaneError> {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig(
                &self.server,
                &self.ca.display().to_string(),
                &format!("token: {token}"),
            ),
        )
        .map_err(|e| fail(e.to_string()))?;
        Ok(path)
    }

    /// A client with the admin certificate.
    pub async fn admin_client(&self) -> Result<Kube, ControlPlaneError> {
        Kube::connect(&self.api_settings(&self.admin))
            .await
            .map_err(|e| fail(e.to_string()))
    }

    /// API settings for `kubeconfig`, the default namespace watched.
    pub fn api_settings(&self, kubeconfig: &Path) -> ApiSettings {
        ApiSettings {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            ..ApiSettings::default()
        }
    }

    /// The API server's address.
    pub fn server(&self) -> &str {
        &self.server
    }

    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// From the first process started to every node Ready.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Installs the workload CRDs `./dev` copied beside the binaries
    /// (JobSet's, the training operator's PyTorchJob) and waits until the
    /// API server serves them. Their controllers do not run here. The
    /// kinds installed.
    pub async fn install_crds(&self) -> Result<Vec<String>, ControlPlaneError> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let kube = self.admin_client().await?;
        let crds: Api<CustomResourceDefinition> = Api::all(kube.client.clone());
        let dir = self.bin.join("crds");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| fail(format!("{}: {e}", dir.display())))?
            .filter_map(|e| Some(e.ok()?.path()))
            .collect();
        files.sort();
        let mut kinds = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|e| fail(e.to_string()))?;
            let crd: CustomResourceDefinition = yaml_serde::from_str(&text)
                .map_err(|e| fail(format!("{}: {e}", file.display())))?;
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.patch(
                &name,
                &PatchParams::apply("unicron-test").force(),
                &Patch::Apply(&crd),
            )
            .await
            .map_err(|e| fail(format!("apply {name}: {e}")))?;
            let deadline = Instant::now() + READY_WITHIN;
            loop {
                let seen = crds.get(&name).await.map_err(|e| fail(e.to_string()))?;
                let established = seen
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(fail(format!(
                        "{name} not established within {READY_WITHIN:?}"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            kinds.push(crd.spec.names.kind.clone());
        }
        Ok(kinds)
    }

    /// Stops `node`'s heartbeat: kwok lets go of it, its lease expires and
    /// the node lifecycle controller marks it NotReady after its grace.
    pub async fn stop_heartbeat(&self, node: &str) -> Result<(), ControlPlaneError> {
        let kube = self.admin_client().await?;
        let nodes: Api<Node> = Api::all(kube.client.clone());
        let patch = serde_json::json!({ "metadata": { "labels": { KWOK_MANAGED: "stopped" } } });
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| fail(format!("patch node {node}: {e}")))
    }

    /// The processes still running, by component.
    pub fn alive(&mut self) -> BTreeMap<&'static str, bool> {
        self.running
            .iter_mut()
            .map(|(name, child)| (*name, matches!(child.try_wait(), Ok(None))))
            .collect()
    }

    /// Kills one component (the API server, to test what unicron does
    /// without it).
    pub fn kill(&mut self, name: &str) {
        for (n, child) in &mut self.running {
            if *n == name {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        for (_, child) in self.running.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
