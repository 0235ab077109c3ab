//! The executor service on the embedded broker, against a fake HTTP backend
//! (axum on 127.0.0.1:0) that counts calls per command id and answers as
//! each test scripts it.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use tokio::sync::oneshot;
use unicron_bus::{Consumer, EmbeddedBroker, Producer};
use unicron_codec::{AvroCodec, KafkaConfig};
use unicron_core::CommandStatus::{Accepted, Failed, Rejected, Succeeded};
use unicron_core::executor::{ActionRequest, Backoff};
use unicron_core::signing::CommandSigner;
use unicron_core::*;
use unicron_executor::{BackendSettings, ExecSettings, ExecutorSettings, HttpSettings};

const WAIT: Duration = Duration::from_secs(30);
const CLUSTER: &str = "c1";

fn signer() -> CommandSigner {
    CommandSigner::from_seed("k1", [3; 32])
}

/// How the fake backend answers one call.
#[derive(Debug, Clone, Copy)]
enum Reply {
    Ok,
    Status(u16, &'static str),
    /// Never answers (until the test ends).
    Hang,
}

#[derive(Default)]
struct FakeState {
    /// Command id → the `attempt` of every call.
    calls: BTreeMap<String, Vec<u32>>,
    script: BTreeMap<String, VecDeque<Reply>>,
    /// Calls whose Idempotency-Key header was not the command id.
    bad_keys: Vec<String>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<FakeState>>);

impl Fake {
    /// Serves on a free port; returns the fake and its URL.
    async fn start() -> (Fake, String) {
        let fake = Fake::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/actions", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/actions", post(act))
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (fake, url)
    }

    /// The next calls for `id` get `replies`, then 200 succeeded.
    fn script(&self, id: &str, replies: &[Reply]) {
        let mut state = self.0.lock().unwrap();
        state
            .script
            .entry(id.to_string())
            .or_default()
            .extend(replies);
    }

    fn attempts(&self, id: &str) -> Vec<u32> {
        let state = self.0.lock().unwrap();
        assert!(state.bad_keys.is_empty(), "{:?}", state.bad_keys);
        state.calls.get(id).cloned().unwrap_or_default()
    }

    fn total_calls(&self) -> usize {
        self.0.lock().unwrap().calls.values().map(Vec::len).sum()
    }
}

async fn act(State(fake): State<Fake>, headers: HeaderMap, body: String) -> (StatusCode, String) {
    let Ok(request) = serde_json::from_str::<ActionRequest>(&body) else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("bad body: {body}"),
        );
    };
    let reply = {
        let mut state = fake.0.lock().unwrap();
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if key != request.command_id {
            state
                .bad_keys
                .push(format!("{key} for {}", request.command_id));
        }
        state
            .calls
            .entry(request.command_id.clone())
            .or_default()
            .push(request.attempt);
        state
            .script
            .get_mut(&request.command_id)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Reply::Ok)
    };
    match reply {
        Reply::Ok => (
            StatusCode::OK,
            r#"{"status":"succeeded","duration_ms":1500}"#.into(),
        ),
        Reply::Status(code, body) => (StatusCode::from_u16(code).unwrap(), body.into()),
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(600)).await;
            (StatusCode::OK, r#"{"status":"succeeded"}"#.into())
        }
    }
}

struct Harness {
    broker: EmbeddedBroker,
    kafka: KafkaConfig,
    producer: Producer,
    fake: Fake,
    url: String,
    time_ms: i64,
}

impl Harness {
    async fn new() -> Harness {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let (broker, kafka) = unicron_bus::testing::embedded_with_topics();
        let producer = Producer::new(&kafka, broker.bootstrap_servers()).unwrap();
        let (fake, url) = Fake::start().await;
        Harness {
            broker,
            kafka,
            producer,
            fake,
            url,
            time_ms: 1_764_000_000_000,
        }
    }

    fn settings(&self, state_dir: &Path) -> ExecutorSettings {
        let public = hex::encode(signer().verifying_key().as_bytes());
        ExecutorSettings {
            cluster: CLUSTER.into(),
            name: "exec-test".into(),
            state_dir: state_dir.to_path_buf(),
            public_keys: BTreeMap::from([("k1".to_string(), public)]),
            command_ttl_s: 60.0,
            backoff: Backoff {
                max_attempts: 3,
                initial_ms: 10,
                max_ms: 40,
            },
            backend: Some(BackendSettings::Http(HttpSettings {
                url: self.url.clone(),
                timeout_s: 5.0,
            })),
            ..ExecutorSettings::default()
        }
    }

    fn start(&self, settings: ExecutorSettings) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let (kafka, brokers) = (
            self.kafka.clone(),
            self.broker.bootstrap_servers().to_string(),
        );
        let task = tokio::spawn(async move {
            let executor = settings.build().unwrap();
            unicron_executor::run(&kafka, &brokers, executor, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Running { stop, task }
    }

    /// A command for our cluster, signed by the trusted key, one second
    /// after the previous one.
    fn command(&mut self, id: &str, action: CommandAction) -> Command {
        self.time_ms += 1000;
        let mut command = Command {
            id: id.into(),
            cluster: CLUSTER.into(),
            decision_id: format!("d-{id}"),
            time_ms: self.time_ms,
            action,
            job: Some("gpt".into()),
            nodes: vec!["n1".into(), "n2".into()],
            restore_from: None,
            causation: vec![],
            key_id: String::new(),
            signature: vec![],
            rendezvous: None,
            snapshots: None,
        };
        signer().sign(&mut command);
        command
    }

    async fn send(&self, key: &str, command: &Command) {
        self.producer
            .send(
                &self.kafka.topic("commands"),
                key,
                command,
                &AvroCodec::default(),
            )
            .await
            .unwrap();
    }

    fn reader(&self, topic: &str) -> Consumer {
        let consumer = Consumer::new(
            &self.kafka,
            self.broker.bootstrap_servers(),
            &format!("t-{topic}"),
        )
        .unwrap();
        consumer.subscribe(&[&self.kafka.topic(topic)]).unwrap();
        consumer
    }
}

/// An executor task; stop it before the broker goes, or closing its
/// consumer waits for a broker that is not there.
struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        unicron_bus::testing::stop_service(self.stop, self.task, WAIT).await;
    }
}

async fn results(consumer: &Consumer, n: usize) -> Vec<CommandResult> {
    unicron_bus::testing::read_records(consumer, n, WAIT).await
}

/// (command id, status) of each result.
fn summary(results: &[CommandResult]) -> Vec<(String, CommandStatus)> {
    results
        .iter()
        .map(|r| (r.command_id.clone(), r.status))
        .collect()
}

fn pairs(expected: &[(&str, CommandStatus)]) -> Vec<(String, CommandStatus)> {
    expected
        .iter()
        .map(|(id, status)| (id.to_string(), *status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_command_is_accepted_then_succeeds_once() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    let running = h.start(h.settings(dir.path()));
    let command = h.command("cmd-1", CommandAction::Restart);
    h.send(CLUSTER, &command).await;

    let out = results(&h.reader("command-results"), 2).await;
    assert_eq!(
        summary(&out),
        pairs(&[("cmd-1", Accepted), ("cmd-1", Succeeded)])
    );
    assert_eq!(
        (out[0].time_ms, out[0].duration_ms, out[0].reason.clone()),
        (command.time_ms, 0, None)
    );
    // The backend's duration, stamped in event time.
    assert_eq!(
        (out[1].time_ms, out[1].duration_ms),
        (command.time_ms + 1500, 1500)
    );
    assert!(
        out.iter()
            .all(|r| r.cluster == CLUSTER && r.executor == "exec-test")
    );
    assert_eq!(h.fake.attempts("cmd-1"), [1]);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_delivered_twice_acts_once() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    let twice = h.command("cmd-1", CommandAction::Reattempt);
    let next = h.command("cmd-2", CommandAction::Reattempt);
    h.send(CLUSTER, &twice).await;
    h.send(CLUSTER, &twice).await;
    h.send(CLUSTER, &next).await;
    let running = h.start(h.settings(dir.path()));

    let out = results(&h.reader("command-results"), 4).await;
    assert_eq!(
        summary(&out),
        pairs(&[
            ("cmd-1", Accepted),
            ("cmd-1", Succeeded),
            ("cmd-2", Accepted),
            ("cmd-2", Succeeded)
        ])
    );
    assert_eq!(h.fake.attempts("cmd-1"), [1]);
    running.stop().await;
}

/// The dedupe table and the gate's watermark live in the store: after a
/// restart on the same state_dir a redelivered command does not act, and
/// expiry still measures against the newest command seen before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_same_state_dir_does_not_act_again() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    let old = h.command("cmd-old", CommandAction::Restart);
    h.time_ms += 120_000;
    let first = h.command("cmd-1", CommandAction::Restart);
    let running = h.start(h.settings(dir.path()));
    h.send(CLUSTER, &first).await;
    let reader = h.reader("command-results");
    let out = results(&reader, 2).await;
    assert_eq!(
        summary(&out),
        pairs(&[("cmd-1", Accepted), ("cmd-1", Succeeded)])
    );
    running.stop().await;

    let running = h.start(h.settings(dir.path()));
    let next = h.command("cmd-2", CommandAction::Restart);
    h.send(CLUSTER, &first).await;
    h.send(CLUSTER, &old).await;
    h.send(CLUSTER, &next).await;
    let out = results(&reader, 3).await;
    assert_eq!(
        summary(&out),
        pairs(&[
            ("cmd-old", Rejected),
            ("cmd-2", Accepted),
            ("cmd-2", Succeeded)
        ])
    );
    assert!(out[0].reason.as_deref().unwrap().starts_with("expired"));
    assert_eq!(h.fake.attempts("cmd-1"), [1]);
    assert_eq!(h.fake.attempts("cmd-old"), Vec::<u32>::new());
    running.stop().await;
}

/// Stopping while the backend has not answered leaves the command started:
/// the next run sends it again (backends are idempotent by command id) and
/// publishes one final result, without a second Accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_interrupted_by_a_stop_is_sent_again_after_restart() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    h.fake.script("cmd-1", &[Reply::Hang]);
    let command = h.command("cmd-1", CommandAction::Reconfigure);
    h.send(CLUSTER, &command).await;
    let running = h.start(h.settings(dir.path()));
    let reader = h.reader("command-results");
    let out = results(&reader, 1).await;
    assert_eq!(summary(&out), pairs(&[("cmd-1", Accepted)]));
    for _ in 0..100 {
        if !h.fake.attempts("cmd-1").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(h.fake.attempts("cmd-1"), [1]);
    running.stop().await;

    let running = h.start(h.settings(dir.path()));
    let next = h.command("cmd-2", CommandAction::Restart);
    h.send(CLUSTER, &next).await;
    let out = results(&reader, 3).await;
    assert_eq!(
        summary(&out),
        pairs(&[
            ("cmd-1", Succeeded),
            ("cmd-2", Accepted),
            ("cmd-2", Succeeded)
        ])
    );
    assert_eq!(h.fake.attempts("cmd-1"), [1, 1]);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_forged_and_foreign_commands_are_rejected_without_acting() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mut unsigned = h.command("cmd-unsigned", CommandAction::IsolateNode);
    unsigned.signature.clear();
    let mut forged = h.command("cmd-forged", CommandAction::IsolateNode);
    CommandSigner::from_seed("k9", [9; 32]).sign(&mut forged);
    let mut foreign = h.command("cmd-foreign", CommandAction::IsolateNode);
    foreign.cluster = "other".into();
    signer().sign(&mut foreign);
    let valid = h.command("cmd-ok", CommandAction::IsolateNode);
    h.send(CLUSTER, &unsigned).await;
    h.send(CLUSTER, &forged).await;
    h.send(CLUSTER, &foreign).await;
    // Keyed to another cluster: its executor's business, not ours.
    h.send("other", &foreign).await;
    h.send(CLUSTER, &valid).await;
    let running = h.start(h.settings(dir.path()));

    let out = results(&h.reader("command-results"), 5).await;
    assert_eq!(
        summary(&out),
        pairs(&[
            ("cmd-unsigned", Rejected),
            ("cmd-forged", Rejected),
            ("cmd-foreign", Rejected),
            ("cmd-ok", Accepted),
            ("cmd-ok", Succeeded)
        ])
    );
    let reason = |i: usize| out[i].reason.clone().unwrap();
    assert!(reason(0).starts_with("unsigned"), "{}", reason(0));
    assert!(reason(1).starts_with("forged"), "{}", reason(1));
    assert!(reason(1).contains("k9"), "{}", reason(1));
    assert!(reason(2).starts_with("foreign"), "{}", reason(2));
    // Results carry the executor's cluster, whatever the command claims.
    assert!(out.iter().all(|r| r.cluster == CLUSTER));
    assert_eq!(h.fake.total_calls(), 1);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_older_than_the_ttl_is_rejected_as_expired() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    let old = h.command("cmd-old", CommandAction::Restart);
    h.time_ms += 60_000; // newer by 61 s, the TTL is 60 s
    let new = h.command("cmd-new", CommandAction::Restart);
    h.send(CLUSTER, &new).await;
    h.send(CLUSTER, &old).await;
    let running = h.start(h.settings(dir.path()));

    let out = results(&h.reader("command-results"), 3).await;
    assert_eq!(
        summary(&out),
        pairs(&[
            ("cmd-new", Accepted),
            ("cmd-new", Succeeded),
            ("cmd-old", Rejected)
        ])
    );
    let reason = out[2].reason.clone().unwrap();
    assert!(reason.starts_with("expired"), "{reason}");
    assert!(reason.contains("61000 ms"), "{reason}");
    assert_eq!(h.fake.attempts("cmd-old"), Vec::<u32>::new());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_backend_errors_are_retried_then_given_up() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    let unavailable = Reply::Status(503, "warming up");
    h.fake.script("cmd-1", &[unavailable, unavailable]);
    h.fake.script("cmd-2", &[unavailable; 3]);
    let recovers = h.command("cmd-1", CommandAction::Restart);
    let stays_down = h.command("cmd-2", CommandAction::Restart);
    h.send(CLUSTER, &recovers).await;
    h.send(CLUSTER, &stays_down).await;
    let running = h.start(h.settings(dir.path()));

    let out = results(&h.reader("command-results"), 4).await;
    assert_eq!(
        summary(&out),
        pairs(&[
            ("cmd-1", Accepted),
            ("cmd-1", Succeeded),
            ("cmd-2", Accepted),
            ("cmd-2", Failed)
        ])
    );
    assert_eq!(h.fake.attempts("cmd-1"), [1, 2, 3]);
    assert_eq!(h.fake.attempts("cmd-2"), [1, 2, 3]);
    assert_eq!(
        out[3].reason.as_deref(),
        Some("backend unavailable after 3 attempts: HTTP 503: warming up")
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_refuses_fails_the_command_without_retry() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    h.fake
        .script("cmd-1", &[Reply::Status(400, "no such job: gpt")]);
    let command = h.command("cmd-1", CommandAction::Pause);
    h.send(CLUSTER, &command).await;
    let running = h.start(h.settings(dir.path()));

    let out = results(&h.reader("command-results"), 2).await;
    assert_eq!(
        summary(&out),
        pairs(&[("cmd-1", Accepted), ("cmd-1", Failed)])
    );
    assert_eq!(
        out[1].reason.as_deref(),
        Some("backend refused: HTTP 400: no such job: gpt")
    );
    assert_eq!(h.fake.attempts("cmd-1"), [1]);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exec_backend_reports_exit_codes_and_stderr() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = h.settings(dir.path());
    let script = r#"test "$1" = restart && test "$UNICRON_NODES" = n1,n2 && exit 0; echo "oops: $1 $2" >&2; exit 3"#;
    settings.backend = Some(BackendSettings::Exec(ExecSettings {
        program: "sh".into(),
        args: vec![
            "-c".into(),
            script.into(),
            "sh".into(),
            "{action}".into(),
            "{command_id}".into(),
        ],
        timeout_s: 10.0,
    }));
    let works = h.command("cmd-1", CommandAction::Restart);
    let fails = h.command("cmd-2", CommandAction::Pause);
    h.send(CLUSTER, &works).await;
    h.send(CLUSTER, &fails).await;
    let running = h.start(settings);

    let out = results(&h.reader("command-results"), 4).await;
    assert_eq!(
        summary(&out),
        pairs(&[
            ("cmd-1", Accepted),
            ("cmd-1", Succeeded),
            ("cmd-2", Accepted),
            ("cmd-2", Failed)
        ])
    );
    assert_eq!(
        out[3].reason.as_deref(),
        Some("`sh` failed: exit code 3: oops: pause cmd-2")
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_records_are_dead_lettered_and_processing_goes_on() {
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    let topic = h.kafka.topic("commands");
    h.producer
        .send_bytes(&topic, CLUSTER.as_bytes(), b"\xff\xfe not avro")
        .await
        .unwrap();
    let valid = h.command("cmd-1", CommandAction::Resume);
    h.send(CLUSTER, &valid).await;
    let running = h.start(h.settings(dir.path()));

    let dlq = h.reader("dlq");
    let letters: Vec<DeadLetter> = unicron_bus::testing::read_records(&dlq, 1, WAIT).await;
    assert_eq!(letters[0].source_topic, topic);
    assert_eq!(letters[0].service, "executor");
    assert_eq!(letters[0].key.as_deref(), Some(CLUSTER.as_bytes()));
    assert!(
        letters[0].error.starts_with("avro Command"),
        "{}",
        letters[0].error
    );
    let out = results(&h.reader("command-results"), 2).await;
    assert_eq!(
        summary(&out),
        pairs(&[("cmd-1", Accepted), ("cmd-1", Succeeded)])
    );
    running.stop().await;
}
