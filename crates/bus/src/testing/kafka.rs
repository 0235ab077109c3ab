//! Apache Kafka for tests and benchmarks: a KRaft cluster of combined
//! broker + controller JVMs on loopback, run from the jars `./dev test`
//! fetches from Maven Central (tools/kafka/). Every node has its own ports
//! and log dir; topics default to three replicas with
//! `min.insync.replicas=2`, as a production cluster is set up
//! (docs/operations.md). The cluster is killed when the handle drops.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};

/// The Apache Kafka release tools/kafka/pom.xml pins.
pub const KAFKA_VERSION: &str = "4.1.1";

pub use super::kafka_options::{KafkaOptions, SaslSsl};

/// Any KRaft cluster id works; every test cluster has its own storage.
const CLUSTER_ID: &str = "dW5pY3Jvbi10ZXN0LWthZg";

/// How long a starting cluster, or a restarted node, may take on a loaded
/// 2-core machine (three JVMs start in about 12 s on an idle one).
const READY_WITHIN: Duration = Duration::from_secs(120);

/// Something the cluster could not do, with the broker log's tail.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KafkaError(String);

/// The directory of Kafka's runtime jars: `$UNICRON_KAFKA_LIBS`, else where
/// `./dev test` puts them (`$UNICRON_CACHE`, `~/.cache/unicron`, CI's cache).
pub fn kafka_libs() -> Option<PathBuf> {
    let cached = |dir: Option<PathBuf>| dir.map(|d| d.join(format!("kafka-{KAFKA_VERSION}/libs")));
    [
        std::env::var_os("UNICRON_KAFKA_LIBS").map(PathBuf::from),
        cached(std::env::var_os("UNICRON_CACHE").map(PathBuf::from)),
        cached(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/unicron"))),
        cached(Some(PathBuf::from("/var/cache/unicron-tools"))),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.join(format!("kafka_2.13-{KAFKA_VERSION}.jar")).is_file())
}

/// [`kafka_libs`], or `None` to skip the test, which is allowed only
/// outside CI: under CI missing jars fail it.
pub fn kafka_or_skip() -> Option<PathBuf> {
    let found = kafka_libs();
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but Apache Kafka is missing: ./dev test installs it"
        );
        eprintln!(
            "skipped: no Apache Kafka (./dev setup test fetches it; or set UNICRON_KAFKA_LIBS)"
        );
    }
    found
}

struct Node {
    id: u32,
    client: SocketAddr,
    /// The plaintext listener brokers replicate over; the clients' one
    /// when that is plaintext too.
    internal: SocketAddr,
    config: PathBuf,
    logs: PathBuf,
    starts: u32,
    child: Option<Child>,
}

/// A running Apache Kafka cluster.
pub struct KafkaCluster {
    libs: PathBuf,
    dir: PathBuf,
    nodes: Vec<Node>,
    heap_mb: u32,
    scratch: Option<tempfile::TempDir>,
}

fn free_addrs(n: usize, host: std::net::IpAddr) -> Result<Vec<SocketAddr>, KafkaError> {
    // Held together, so no two are the same port.
    let listeners = (0..n)
        .map(|_| TcpListener::bind((host, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| KafkaError(format!("no free port: {e}")))?;
    listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()
        .map_err(|e| KafkaError(format!("no free port: {e}")))
}

fn java() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin/java"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("java"))
}

const LOG4J2: &str = "Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: \"[%d] %p %m (%c)%n\"
  Loggers:
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
      - name: kafka.server.ControllerServer
        level: INFO
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
";

impl KafkaCluster {
    /// Formats and starts a cluster in `dir` (a temporary directory when
    /// `None`), and waits until every broker is registered.
    pub fn start(
        libs: &Path,
        dir: Option<&Path>,
        options: &KafkaOptions,
    ) -> Result<KafkaCluster, KafkaError> {
        let io = |what: &str, e: std::io::Error| KafkaError(format!("{what}: {e}"));
        let scratch = match dir {
            Some(_) => None,
            None => Some(
                tempfile::Builder::new()
                    .prefix("unicron-kafka-")
                    .tempdir()
                    .map_err(|e| io("temporary directory", e))?,
            ),
        };
        let dir = dir
            .map(Path::to_path_buf)
            .or_else(|| scratch.as_ref().map(|s| s.path().to_path_buf()))
            .expect("a directory");
        std::fs::create_dir_all(&dir).map_err(|e| io("kafka directory", e))?;
        std::fs::write(dir.join("log4j2.yaml"), LOG4J2).map_err(|e| io("log4j2.yaml", e))?;
        let n = options.brokers.max(1);
        let tls = options.sasl_ssl.is_some();
        let ports = free_addrs(n * if tls { 3 } else { 2 }, options.host)?;
        let controllers: Vec<SocketAddr> = ports[..n].to_vec();
        let voters = controllers
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}@{a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let id = i as u32 + 1;
            let client = ports[n + i];
            let internal = if tls { ports[2 * n + i] } else { client };
            let data = dir.join(format!("node-{id}"));
            std::fs::create_dir_all(&data).map_err(|e| io("log dir", e))?;
            let mut props = format!(
                "process.roles=broker,controller
node.id={id}
controller.quorum.voters={voters}
controller.listener.names=CONTROLLER
log.dirs={data}
# Production's replication, on three brokers.
default.replication.factor={rf}
min.insync.replicas={isr}
offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=12
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={isr}
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={isr}
num.partitions=3
# A test's group forms at once instead of after Kafka's 3 s.
group.initial.rebalance.delay.ms=0
# Three brokers share a few cores with the services: fewer threads than
# Kafka's defaults (8 I/O, 3 network, 10 background).
num.io.threads=2
num.network.threads=2
background.threads=4
",
                data = data.join("data").display(),
                rf = n.min(3),
                isr = n.min(2),
            );
            match &options.sasl_ssl {
                None => props.push_str(&format!(
                    "listeners=PLAINTEXT://{client},CONTROLLER://{controller}
advertised.listeners=PLAINTEXT://{client}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
",
                    controller = controllers[i],
                )),
                Some(sasl) => props.push_str(&format!(
                    "listeners=SASL_SSL://{client},INTERNAL://{internal},CONTROLLER://{controller}
advertised.listeners=SASL_SSL://{client},INTERNAL://{internal}
listener.security.protocol.map=SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
",
                    controller = controllers[i],
                    keystore = sasl.keystore_pem.display(),
                )),
            }
            if let Some(sasl) = options.sasl_ssl.as_ref().filter(|s| s.authorizer) {
                props.push_str(&format!(
                    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{};User:ANONYMOUS
",
                    sasl.user
                ));
            }
            let config = data.join("server.properties");
            std::fs::write(&config, props).map_err(|e| io("server.properties", e))?;
            nodes.push(Node {
                id,
                client,
                internal,
                config,
                logs: data,
                starts: 0,
                child: None,
            });
        }
        let mut cluster = KafkaCluster {
            libs: libs.to_path_buf(),
            dir,
            nodes,
            heap_mb: options.heap_mb,
            scratch,
        };
        cluster.format(options.sasl_ssl.as_ref())?;
        for i in 0..cluster.nodes.len() {
            cluster.spawn(i)?;
        }
        cluster.wait_registered(n)?;
        Ok(cluster)
    }

    /// Writes an executable script at `path` that runs Kafka's tool
    /// `main` (e.g. `org.apache.kafka.tools.AclCommand`, what `kafka-acls.sh` runs)
    /// with this cluster's jars and the script's arguments.
    pub fn tool_script(&self, main: &str, path: &Path) -> Result<(), KafkaError> {
        let script = format!(
            "#!/bin/sh\nexec '{}' -Xmx256m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile='{}' -cp '{}/*' {main} \"$@\"\n",
            java().display(),
            self.dir.join("log4j2.yaml").display(),
            self.libs.display()
        );
        std::fs::write(path, script).map_err(|e| KafkaError(format!("{}: {e}", path.display())))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| KafkaError(format!("{}: {e}", path.display())))
    }

    fn java_command(&self, jvm: &[String], main: &str) -> Command {
        let mut command = Command::new(java());
        command
            .args(jvm)
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.dir.join("log4j2.yaml").display()
            ))
            .arg("-cp")
            .arg(format!("{}/*", self.libs.display()))
            .arg(main)
            .stdin(Stdio::null());
        command
    }

    /// `kafka-storage format` for every node, in parallel.
    fn format(&self, sasl: Option<&SaslSsl>) -> Result<(), KafkaError> {
        let children = self
            .nodes
            .iter()
            .map(|node| {
                let mut command = self.java_command(&[], "kafka.tools.StorageTool");
                command
                    .args(["format", "--ignore-formatted", "-t", CLUSTER_ID, "-c"])
                    .arg(&node.config);
                if let Some(s) = sasl {
                    for (user, password) in std::iter::once((&s.user, &s.password))
                        .chain(s.more_users.iter().map(|(u, p)| (u, p)))
                    {
                        command
                            .arg("--add-scram")
                            .arg(format!("SCRAM-SHA-512=[name={user},password={password}]"));
                    }
                }
                command
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| {
                        KafkaError(format!("{}: {e} (is Java 17 installed?)", java().display()))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (node, child) in self.nodes.iter().zip(children) {
            let out = child
                .wait_with_output()
                .map_err(|e| KafkaError(format!("format node {}: {e}", node.id)))?;
            if !out.status.success() {
                return Err(KafkaError(format!(
                    "formatting node {} failed: {}{}",
                    node.id,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
        }
        Ok(())
    }

    fn index(&self, id: u32) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id == id)
            .unwrap_or_else(|| panic!("no Kafka node {id}"))
    }

    fn spawn(&mut self, i: usize) -> Result<(), KafkaError> {
        let node = &self.nodes[i];
        let log_path = node
            .logs
            .join(format!("broker-{}-{}.log", node.id, node.starts + 1));
        let log = std::fs::File::create(&log_path)
            .map_err(|e| KafkaError(format!("{}: {e}", log_path.display())))?;
        let err = log
            .try_clone()
            .map_err(|e| KafkaError(format!("{}: {e}", log_path.display())))?;
        let jvm = [
            format!("-Xmx{}m", self.heap_mb),
            "-Xms128m".to_string(),
            "-XX:+ExitOnOutOfMemoryError".to_string(),
            // Fewer GC and compiler threads: several JVMs share few cores.
            "-XX:ParallelGCThreads=1".to_string(),
            "-XX:ConcGCThreads=1".to_string(),
            "-Djava.awt.headless=true".to_string(),
        ];
        let mut command = self.java_command(&jvm, "kafka.Kafka");
        command.arg(&node.config).stdout(log).stderr(err);
        let child = command.spawn().map_err(|e| {
            KafkaError(format!("{}: {e} (is Java 17 installed?)", java().display()))
        })?;
        let node = &mut self.nodes[i];
        node.starts += 1;
        node.child = Some(child);
        Ok(())
    }

    /// The bootstrap list clients use (every node's client listener).
    pub fn bootstrap_servers(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.client.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// One node's client address.
    pub fn address(&self, id: u32) -> SocketAddr {
        self.nodes[self.index(id)].client
    }

    /// The node ids, 1..=N.
    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// Where the cluster keeps its storage and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A node's process id while it runs.
    pub fn pid(&self, id: u32) -> Option<u32> {
        self.nodes[self.index(id)].child.as_ref().map(Child::id)
    }

    /// Whether a node's JVM is running.
    pub fn running(&mut self, id: u32) -> bool {
        let i = self.index(id);
        match &mut self.nodes[i].child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn internal_bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.internal.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn metadata_client(&self) -> Result<BaseConsumer, KafkaError> {
        ClientConfig::new()
            .set("bootstrap.servers", self.internal_bootstrap())
            .set("log_level", "0")
            .create()
            .map_err(|e| KafkaError(format!("metadata client: {e}")))
    }

    /// The node that leads `topic`'s `partition`, if it has a leader.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<u32> {
        let client = self.metadata_client().ok()?;
        let metadata = client
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()?;
        let t = metadata.topics().first()?;
        let p = t.partitions().iter().find(|p| p.id() == partition)?;
        (p.leader() >= 0).then_some(p.leader() as u32)
    }

    /// SIGKILL: a crash, not a shutdown.
    pub fn kill(&mut self, id: u32) {
        let i = self.index(id);
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM: a controlled shutdown that moves leadership away first.
    pub fn stop(&mut self, id: u32) {
        let i = self.index(id);
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a stopped or killed node on its storage and waits until it
    /// is registered again.
    pub fn start_node(&mut self, id: u32) -> Result<(), KafkaError> {
        let i = self.index(id);
        if self.nodes[i].child.is_some() {
            return Ok(());
        }
        self.spawn(i)?;
        self.wait_registered(self.nodes.len())
    }

    /// Waits until `expected` brokers are in the cluster's metadata and
    /// every node's client listener accepts connections.
    fn wait_registered(&mut self, expected: usize) -> Result<(), KafkaError> {
        let started = Instant::now();
        loop {
            for i in 0..self.nodes.len() {
                let id = self.nodes[i].id;
                if self.nodes[i].child.is_some() && !self.running(id) {
                    return Err(KafkaError(format!(
                        "Kafka node {id} exited while starting:\n{}",
                        self.log_tail(id, 30)
                    )));
                }
            }
            let listening =
                self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                    TcpStream::connect_timeout(&n.client, Duration::from_millis(200)).is_ok()
                });
            if listening
                && let Ok(client) = self.metadata_client()
                && let Ok(metadata) = client.fetch_metadata(None, Duration::from_secs(2))
                && metadata.brokers().len() >= expected
            {
                return Ok(());
            }
            if started.elapsed() > READY_WITHIN {
                let id = self.nodes[0].id;
                return Err(KafkaError(format!(
                    "Apache Kafka did not have {expected} brokers within {} s:\n{}",
                    READY_WITHIN.as_secs(),
                    self.log_tail(id, 30)
                )));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until every partition has a leader and all its replicas in
    /// sync: what an operator waits for between two restarts of a rolling
    /// restart.
    pub fn wait_in_sync(&self, within: Duration) -> Result<(), KafkaError> {
        let started = Instant::now();
        loop {
            let last = match self.out_of_sync() {
                Ok(0) => return Ok(()),
                Ok(usize::MAX) => "a broker is not registered".to_string(),
                Ok(n) => format!("{n} partitions under-replicated or leaderless"),
                Err(e) => e.to_string(),
            };
            if started.elapsed() > within {
                return Err(KafkaError(format!(
                    "not in sync within {} s: {last}",
                    within.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn out_of_sync(&self) -> Result<usize, KafkaError> {
        let client = self.metadata_client()?;
        let metadata = client
            .fetch_metadata(None, Duration::from_secs(5))
            .map_err(|e| KafkaError(format!("metadata: {e}")))?;
        if metadata.brokers().len() < self.nodes.len() {
            return Ok(usize::MAX);
        }
        Ok(metadata
            .topics()
            .iter()
            .flat_map(|t| t.partitions())
            .filter(|p| p.leader() < 0 || p.isr().len() < p.replicas().len())
            .count())
    }

    /// Kills `id` and starts it again on the same storage.
    pub fn restart(&mut self, id: u32) -> Result<(), KafkaError> {
        self.kill(id);
        self.start_node(id)
    }

    /// A rolling restart as an operator does it: one node at a time with a
    /// controlled shutdown, waiting for every partition to be back in sync
    /// before the next.
    pub fn rolling_restart(&mut self) -> Result<(), KafkaError> {
        for id in self.node_ids() {
            self.wait_in_sync(READY_WITHIN)?;
            self.stop(id);
            self.start_node(id)?;
        }
        self.wait_in_sync(READY_WITHIN)
    }

    /// The last `lines` lines of a node's newest log.
    pub fn log_tail(&self, id: u32, lines: usize) -> String {
        let node = &self.nodes[self.index(id)];
        let path = node
            .logs
            .join(format!("broker-{}-{}.log", node.id, node.starts.max(1)));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Stops every node (controlled shutdown of the last ones is skipped:
    /// without a quorum it would wait for nothing).
    pub fn shutdown(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl KafkaCluster {
    /// Stops every node and removes a data directory of its own: for a
    /// caller that ends with `std::process::exit`, which skips `Drop`.
    pub fn close(&mut self) {
        self.shutdown();
        self.scratch.take();
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}
