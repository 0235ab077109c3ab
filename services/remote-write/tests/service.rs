//! The receiver on the embedded broker: real HTTP requests in, records on
//! `unicron.telemetry` and `unicron.dlq` out, and the answers Prometheus
//! acts on (204 done, 400 dropped, 5xx sent again).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use prost::Message as _;
use tokio::sync::oneshot;
use unicron_bus::Consumer;
use unicron_bus::testing::{embedded_with_topics, read_records, stop_service};
use unicron_codec::KafkaConfig;
use unicron_core::{DeadLetter, TelemetryBatch};
use unicron_remote_write::proto::{Label, STALE_NAN_BITS, Sample, TimeSeries, WriteRequest};
use unicron_remote_write::{Receiver, RemoteWriteSettings};

const WAIT: Duration = Duration::from_secs(30);

fn series(labels: &[(&str, &str)], samples: &[(f64, i64)]) -> TimeSeries {
    TimeSeries {
        labels: labels
            .iter()
            .map(|(name, value)| Label {
                name: name.to_string(),
                value: value.to_string(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|&(value, timestamp)| Sample { value, timestamp })
            .collect(),
    }
}

fn body(series: Vec<TimeSeries>) -> Vec<u8> {
    let request = WriteRequest {
        timeseries: series,
        metadata: Vec::new(),
    };
    snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .unwrap()
}

/// POSTs `body` as Prometheus does; the status and the reply's body.
async fn post(addr: SocketAddr, body: Vec<u8>) -> (u16, String) {
    let headers = "Content-Encoding: snappy\r\nContent-Type: application/x-protobuf\r\n\
                   X-Prometheus-Remote-Write-Version: 0.1.0\r\n";
    post_with(addr, headers, body).await
}

/// POSTs `body` with `headers` (each ending in CRLF).
async fn post_with(addr: SocketAddr, headers: impl Into<String>, body: Vec<u8>) -> (u16, String) {
    let headers: String = headers.into();
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "POST /api/v1/write HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        // The server may answer (413) before reading the body.
        let _ = stream.write_all(&body);
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        let status = reply[9..12].parse().unwrap();
        let text = reply
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or("")
            .trim()
            .to_string();
        (status, text)
    })
    .await
    .unwrap()
}

/// dcgm-exporter's labels of one GPU's series, and Prometheus' `job`.
fn dcgm(host: &str, gpu: &str, name: &str) -> Vec<(String, String)> {
    [
        ("__name__", name.to_string()),
        ("Hostname", host.to_string()),
        ("gpu", gpu.to_string()),
        ("UUID", format!("GPU-{host}-{gpu}")),
        ("job", "dcgm".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn as_refs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(kafka: &KafkaConfig, brokers: &str, settings: RemoteWriteSettings) -> Running {
    let settings = RemoteWriteSettings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..settings
    };
    let receiver = Receiver::bind(kafka, brokers, &settings).await.unwrap();
    let addr = receiver.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        receiver
            .serve(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Running { addr, stop, task }
}

fn reader(kafka: &KafkaConfig, brokers: &str, topic: &str) -> Consumer {
    let consumer = Consumer::new(kafka, brokers, &format!("test-{topic}")).unwrap();
    consumer.subscribe(&[&kafka.topic(topic)]).unwrap();
    consumer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_become_node_keyed_batches_and_bad_bodies_dead_letters() {
    let (broker, kafka) = embedded_with_topics();
    let brokers = broker.bootstrap_servers().to_string();
    let running = start(&kafka, &brokers, RemoteWriteSettings::default()).await;
    let telemetry = reader(&kafka, &brokers, "telemetry");
    let dlq = reader(&kafka, &brokers, "dlq");

    let xid = dcgm("node-b", "3", "DCGM_FI_DEV_XID_ERRORS");
    let ecc = dcgm("node-a", "0", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL");
    let temp = dcgm("node-b", "1", "DCGM_FI_DEV_GPU_TEMP");
    let stale = f64::from_bits(STALE_NAN_BITS);
    let good = body(vec![
        series(&as_refs(&xid), &[(0.0, 1_000), (79.0, 2_000)]),
        series(&as_refs(&ecc), &[(2.0, 1_000)]),
        series(&as_refs(&temp), &[(stale, 2_000)]),
    ]);
    assert_eq!(post(running.addr, good).await, (204, String::new()));
    let mut batches: Vec<TelemetryBatch> = read_records(&telemetry, 2, WAIT).await;
    batches.sort_by(|a, b| a.node.cmp(&b.node));
    assert_eq!(batches[0].node, "node-a");
    assert_eq!(batches[1].node, "node-b");
    let values: Vec<_> = batches[1]
        .samples
        .iter()
        .map(|s| (s.name.as_str(), s.value, s.gpu))
        .collect();
    assert_eq!(
        values,
        [
            ("DCGM_FI_DEV_XID_ERRORS", 0.0, Some(3)),
            ("DCGM_FI_DEV_XID_ERRORS", 79.0, Some(3))
        ]
    );
    assert_eq!(batches[1].samples[0].labels["UUID"], "GPU-node-b-3");

    // Series without a node are skipped and said so; the rest is published.
    let mixed = body(vec![
        series(
            &[("__name__", "up"), ("instance", "x:9400")],
            &[(1.0, 3_000)],
        ),
        series(&as_refs(&ecc), &[(3.0, 3_000)]),
    ]);
    let (status, text) = post(running.addr, mixed).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("skipped 1 without a node label"), "{text}");
    let batch: Vec<TelemetryBatch> = read_records(&telemetry, 1, WAIT).await;
    assert_eq!(
        (batch[0].node.as_str(), batch[0].samples[0].value),
        ("node-a", 3.0)
    );

    // A request with no node at all: 400, and the body is dead-lettered.
    let nodeless = body(vec![series(
        &[("__name__", "up"), ("instance", "x:9400")],
        &[(1.0, 3_000)],
    )]);
    let (status, text) = post(running.addr, nodeless.clone()).await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.starts_with("none of 1 series has a node label"),
        "{text}"
    );
    assert!(!text.contains('\n'));

    // Not snappy, and snappy of something that is not a WriteRequest.
    let (status, text) = post(running.addr, b"not snappy at all".to_vec()).await;
    assert_eq!(status, 400);
    assert!(text.starts_with("snappy: "), "{text}");
    let garbage = snap::raw::Encoder::new()
        .compress_vec(&[0xff, 0xff, 0xff, 0xff])
        .unwrap();
    let (status, text) = post(running.addr, garbage).await;
    assert_eq!(status, 400);
    assert!(text.starts_with("protobuf WriteRequest: "), "{text}");

    let letters: Vec<DeadLetter> = read_records(&dlq, 3, WAIT).await;
    let reasons: Vec<_> = letters
        .iter()
        .map(|l| {
            (
                l.source_topic.as_str(),
                l.service.as_str(),
                l.error.split(':').next().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "remote-write",
                "remote-write",
                "none of 1 series has a node label"
            ),
            ("remote-write", "remote-write", "snappy"),
            ("remote-write", "remote-write", "protobuf WriteRequest"),
        ]
    );
    assert_eq!(letters[0].payload, nodeless, "the raw body is kept");
    stop_service(running.stop, running.task, WAIT).await;
    drop(broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_write_is_a_503_that_prometheus_retries() {
    // Nothing listens on the broker's address: no acknowledgement comes.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let brokers = unused.local_addr().unwrap().to_string();
    drop(unused);
    let settings = RemoteWriteSettings {
        send_timeout_s: 1.0,
        ..RemoteWriteSettings::default()
    };
    let running = start(&KafkaConfig::default(), &brokers, settings).await;
    let request = body(vec![series(
        &[("__name__", "DCGM_FI_DEV_GPU_TEMP"), ("Hostname", "n1")],
        &[(40.0, 1_000)],
    )]);
    let (status, text) = post(running.addr, request).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("no acknowledgement within"), "{text}");
    let _ = running.stop.send(());
    running.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_413_and_other_encodings_415() {
    let settings = RemoteWriteSettings {
        max_body_bytes: 64,
        ..RemoteWriteSettings::default()
    };
    let running = start(&KafkaConfig::default(), "127.0.0.1:9", settings).await;
    let (status, text) = post(running.addr, vec![0; 65]).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("max_body_bytes (64 bytes)"), "{text}");
    let (status, text) = post_with(running.addr, "Content-Encoding: gzip\r\n", vec![0; 8]).await;
    assert_eq!(status, 415, "{text}");
    assert!(text.contains("only snappy"), "{text}");
    let (status, text) = post_with(
        running.addr,
        "Content-Encoding: snappy\r\nX-Prometheus-Remote-Write-Version: 2.0.0\r\n",
        vec![0; 8],
    )
    .await;
    assert_eq!(status, 415, "{text}");
    assert!(text.contains("remote write 2.0"), "{text}");
    let _ = running.stop.send(());
    running.task.abort();
}

#[tokio::test]
async fn a_taken_address_names_itself() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let settings = RemoteWriteSettings {
        listen: taken.local_addr().unwrap(),
        ..RemoteWriteSettings::default()
    };
    let error = Receiver::bind(&KafkaConfig::default(), "127.0.0.1:9", &settings)
        .await
        .err()
        .expect("the address is taken")
        .to_string();
    assert!(
        error.starts_with(&format!("cannot listen on {}: ", settings.listen)),
        "{error}"
    );
}

/// Prometheus' headers with `Authorization: Bearer TOKEN`.
fn with_token(token: &str) -> String {
    format!(
        "Content-Encoding: snappy\r\nContent-Type: application/x-protobuf\r\n\
         X-Prometheus-Remote-Write-Version: 0.1.0\r\nAuthorization: Bearer {token}\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bound_to_a_cluster_writes_that_cluster_only() {
    let (broker, kafka) = embedded_with_topics();
    let brokers = broker.bootstrap_servers().to_string();
    let dir = tempfile::tempdir().unwrap();
    let token = |name: &str, text: &str, clusters: &[&str]| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        unicron_access::TokenConfig {
            name: name.into(),
            token_file: path,
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
        }
    };
    let settings = RemoteWriteSettings {
        tokens: vec![token("prometheus-a", "token-of-cluster-a-0001\n", &["a"])],
        ..RemoteWriteSettings::default()
    };
    let running = start(&kafka, &brokers, settings).await;
    let telemetry = reader(&kafka, &brokers, "telemetry");
    let dlq = reader(&kafka, &brokers, "dlq");
    let xid = dcgm("node-1", "0", "DCGM_FI_DEV_XID_ERRORS");
    let own = || body(vec![series(&as_refs(&xid), &[(79.0, 1_000)])]);

    // No token, or a wrong one: 401, nothing published.
    let (status, text) = post(running.addr, own()).await;
    assert_eq!(
        (status, text.as_str()),
        (401, "no credentials: send `Authorization: Bearer TOKEN`")
    );
    let (status, text) =
        post_with(running.addr, with_token("token-of-cluster-b-0001"), own()).await;
    assert_eq!((status, text.as_str()), (401, "unknown token"));

    // Series without a cluster label are the token's cluster's.
    let (status, text) =
        post_with(running.addr, with_token("token-of-cluster-a-0001"), own()).await;
    assert_eq!(status, 204, "{text}");
    let batches: Vec<TelemetryBatch> = read_records(&telemetry, 1, WAIT).await;
    assert_eq!(
        (batches[0].cluster.as_str(), batches[0].node.as_str()),
        ("a", "node-1")
    );

    // A series claiming cluster b: the whole request is refused (403) and
    // dead-lettered with the reason; its own series are not published.
    let mut forged = dcgm("node-9", "0", "DCGM_FI_DEV_XID_ERRORS");
    forged.push(("cluster".into(), "b".into()));
    let mixed = body(vec![
        series(&as_refs(&xid), &[(79.0, 2_000)]),
        series(&as_refs(&forged), &[(79.0, 2_000)]),
    ]);
    let (status, text) =
        post_with(running.addr, with_token("token-of-cluster-a-0001"), mixed).await;
    assert_eq!(status, 403, "{text}");
    assert!(
        text.starts_with("foreign_cluster: a series of cluster \"b\""),
        "{text}"
    );
    let letters: Vec<DeadLetter> = read_records(&dlq, 1, WAIT).await;
    assert!(
        letters[0].error.starts_with("foreign_cluster: "),
        "{}",
        letters[0].error
    );
    // The next good write is the next telemetry record: nothing of b came.
    let (status, _) = post_with(running.addr, with_token("token-of-cluster-a-0001"), own()).await;
    assert_eq!(status, 204);
    let next: Vec<TelemetryBatch> = read_records(&telemetry, 1, WAIT).await;
    assert_eq!(next[0].cluster, "a");
    assert_eq!(next[0].samples[0].time_ms, 1_000);
    stop_service(running.stop, running.task, WAIT).await;
    drop(broker);
}

#[tokio::test]
async fn listening_beyond_loopback_needs_a_token() {
    let settings = RemoteWriteSettings {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..RemoteWriteSettings::default()
    };
    let error = Receiver::bind(&KafkaConfig::default(), "127.0.0.1:9", &settings)
        .await
        .err()
        .expect("refused");
    assert!(
        error
            .to_string()
            .starts_with("remote_write.tokens: required when listening on 0.0.0.0:0"),
        "{error}"
    );
}
