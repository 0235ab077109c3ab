//! The HTTP endpoint: `POST /api/v1/write`, one request at a time into
//! Kafka, answered after the broker acknowledged it.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use prost::Message as _;
use unicron_access::{Gate, Grant, REALM};
use unicron_bus::consumer::InboundRecord;
use unicron_bus::dlq::DeadLetterSink;
use unicron_bus::{BusError, Outbound, Producer};
use unicron_codec::formats::LabelMap;
use unicron_codec::{AvroCodec, KafkaConfig, Topic, Topics};
use unicron_core::TelemetryBatch;

use crate::convert::{Converted, convert, split_to_fit};
use crate::error::RemoteWriteError;
use crate::metrics::{
    METRICS, REJECTED, REQUEST_SECONDS, REQUESTS, SAMPLES, SAMPLES_SKIPPED, SERIES_SKIPPED,
};
use crate::proto::WriteRequest;
use crate::settings::RemoteWriteSettings;

/// Where Prometheus posts (the path its own receiver and most others use).
pub const PATH: &str = "/api/v1/write";
/// The service's name in readiness, logs and dead letters.
pub const SERVICE: &str = "remote-write";
/// `DeadLetter.source_topic` of a dead-lettered request body: it came over
/// HTTP, not from a topic. The letter's key is the sender's address.
pub const DLQ_SOURCE: &str = "remote-write";

/// What every request needs.
struct Shared {
    producer: Producer,
    telemetry_topic: String,
    dlq: DeadLetterSink,
    codec: AvroCodec<TelemetryBatch>,
    labels: LabelMap,
    gate: Gate,
    max_body_bytes: usize,
    max_decoded_bytes: usize,
    max_record_bytes: usize,
    send_timeout: Duration,
}

/// An answer: status and a one-line body (none for 204).
struct Answer {
    status: StatusCode,
    text: String,
}

impl Answer {
    /// The text is kept to one line: senders log it as it comes.
    fn new(status: StatusCode, text: impl Into<String>) -> Answer {
        Answer {
            status,
            text: text.into().replace(['\r', '\n'], " "),
        }
    }
}

/// A bound receiver, not yet serving: its address is known (port 0 picks one).
pub struct Receiver {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Receiver {
    /// Checks `settings`, makes the producer and binds `settings.listen`.
    pub async fn bind(
        kafka: &KafkaConfig,
        brokers: &str,
        settings: &RemoteWriteSettings,
    ) -> Result<Receiver, RemoteWriteError> {
        settings.validate()?;
        let gate = Gate::load("remote_write.tokens", &settings.tokens, settings.listen)?;
        unicron_bus::metrics::describe_all(METRICS);
        unicron_bus::metrics::register(SERVICE);
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|source| RemoteWriteError::Listen {
                addr: settings.listen,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| RemoteWriteError::Listen {
                addr: settings.listen,
                source,
            })?;
        // After the address: a bad one is reported before Kafka is tried.
        let topics = Topics::new(kafka);
        let producer = Producer::new(kafka, brokers)?;
        let dlq = DeadLetterSink::new(
            producer.clone(),
            topics.name(Topic::Dlq).to_string(),
            SERVICE,
            kafka.dlq_payload_bytes,
        );
        let shared = Arc::new(Shared {
            producer,
            telemetry_topic: topics.name(Topic::Telemetry).to_string(),
            dlq,
            codec: AvroCodec::default(),
            labels: settings.labels.clone(),
            gate,
            max_body_bytes: settings.max_body_bytes,
            max_decoded_bytes: settings.max_decoded_bytes,
            max_record_bytes: kafka.max_record_bytes,
            send_timeout: Duration::from_secs_f64(settings.send_timeout_s),
        });
        Ok(Receiver {
            listener,
            addr,
            shared,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The telemetry topic it publishes to.
    pub fn telemetry_topic(&self) -> &str {
        &self.shared.telemetry_topic
    }

    /// Serves until `shutdown` completes, then finishes the requests in
    /// flight and flushes the producer.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), RemoteWriteError> {
        let producer = self.shared.producer.clone();
        let app = Router::new()
            .route(PATH, post(write))
            .with_state(self.shared);
        let _ready = unicron_bus::metrics::ReadyGuard::new(SERVICE);
        tracing::info!(addr = %self.addr, "remote-write receiver listening");
        axum::serve(
            self.listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(RemoteWriteError::Serve)?;
        producer.flush(Duration::from_secs(5))?;
        Ok(())
    }
}

/// The label map a request of `grant` is read with: a token bound to one
/// cluster makes that cluster the default, so its senders need no label.
fn bound_labels<'a>(labels: &'a LabelMap, grant: &Grant) -> Cow<'a, LabelMap> {
    match grant.scope.single() {
        Some(cluster) if cluster != labels.default_cluster => {
            let mut bound = labels.clone();
            bound.default_cluster = cluster.to_string();
            Cow::Owned(bound)
        }
        _ => Cow::Borrowed(labels),
    }
}

/// Binds and serves until `shutdown` completes.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: &RemoteWriteSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RemoteWriteError> {
    Receiver::bind(kafka, brokers, settings)
        .await?
        .serve(shutdown)
        .await
}

async fn write(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let answer = shared.handle(peer, &headers, body).await;
    ::metrics::counter!(REQUESTS.name, "status" => answer.status.as_str().to_string()).increment(1);
    ::metrics::histogram!(REQUEST_SECONDS.name).record(started.elapsed().as_secs_f64());
    if answer.status.is_server_error() || answer.status.is_client_error() {
        tracing::warn!(%peer, status = %answer.status, reason = %answer.text, "remote-write request refused");
    }
    if answer.status == StatusCode::NO_CONTENT {
        StatusCode::NO_CONTENT.into_response()
    } else if answer.status == StatusCode::UNAUTHORIZED {
        let challenge = format!("Basic realm=\"{REALM}\", Bearer realm=\"{REALM}\"");
        (
            answer.status,
            [(header::WWW_AUTHENTICATE, challenge)],
            format!("{}\n", answer.text),
        )
            .into_response()
    } else {
        (answer.status, format!("{}\n", answer.text)).into_response()
    }
}

impl Shared {
    async fn handle(&self, peer: SocketAddr, headers: &HeaderMap, body: Body) -> Answer {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let grant = match self.gate.check(authorization) {
            Ok(grant) => grant,
            Err(denied) => {
                ::metrics::counter!(REJECTED.name, "reason" => denied.reason()).increment(1);
                return Answer::new(StatusCode::UNAUTHORIZED, denied.to_string());
            }
        };
        if let Some(refused) = check_headers(headers) {
            return refused;
        }
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let too_large = || {
            Answer::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "body over remote_write.max_body_bytes ({} bytes)",
                    self.max_body_bytes
                ),
            )
        };
        if declared.is_some_and(|n| n > self.max_body_bytes) {
            return too_large();
        }
        let body = match axum::body::to_bytes(body, self.max_body_bytes).await {
            Ok(body) => body,
            Err(e) if e.to_string().contains("length limit") => return too_large(),
            Err(e) => {
                return Answer::new(StatusCode::BAD_REQUEST, format!("reading the body: {e}"));
            }
        };
        let request = match self.decode(&body) {
            Ok(request) => request,
            Err(reason) => return self.refuse(peer, &body, reason).await,
        };
        let converted = convert(request, &bound_labels(&self.labels, grant));
        if let Some(foreign) = converted
            .batches
            .iter()
            .find(|b| !grant.scope.allows(&b.cluster))
        {
            ::metrics::counter!(REJECTED.name, "reason" => "foreign_cluster").increment(1);
            let reason = format!(
                "foreign_cluster: a series of cluster {:?} (node {:?}), which the token {:?} does not write",
                foreign.cluster, foreign.node, grant.name
            );
            let answer = self.refuse(peer, &body, reason).await;
            return match answer.status {
                StatusCode::BAD_REQUEST => Answer::new(StatusCode::FORBIDDEN, answer.text),
                _ => answer,
            };
        }
        count_skipped(&converted);
        if converted.series_kept == 0 && converted.no_node > 0 {
            let reason = format!(
                "none of {} series has a node label: {}",
                converted.no_node,
                self.labels.missing_node()
            );
            return self.refuse(peer, &body, reason).await;
        }
        let samples = converted.samples;
        match self.publish(converted.batches).await {
            Ok(()) => ::metrics::counter!(SAMPLES.name).increment(samples as u64),
            Err(answer) => return answer,
        }
        if converted.no_node + converted.no_name == 0 {
            Answer::new(StatusCode::NO_CONTENT, "")
        } else {
            // Still a success: Prometheus must not send the kept series again.
            Answer::new(
                StatusCode::OK,
                format!(
                    "published {} series; skipped {} without a node label ({}), {} without a name",
                    converted.series_kept,
                    converted.no_node,
                    self.labels.missing_node(),
                    converted.no_name
                ),
            )
        }
    }

    /// Snappy block format, then protobuf; the error is the 400's reason.
    fn decode(&self, body: &[u8]) -> Result<WriteRequest, String> {
        let size = snap::raw::decompress_len(body).map_err(|e| format!("snappy: {e}"))?;
        if size > self.max_decoded_bytes {
            return Err(format!(
                "snappy: decodes to {size} bytes, over remote_write.max_decoded_bytes ({})",
                self.max_decoded_bytes
            ));
        }
        let raw = snap::raw::Decoder::new()
            .decompress_vec(body)
            .map_err(|e| format!("snappy: {e}"))?;
        WriteRequest::decode(raw.as_slice()).map_err(|e| format!("protobuf WriteRequest: {e}"))
    }

    /// 400 with `reason`, once the body is on the dead-letter topic; 503 if
    /// it could not be put there (Prometheus sends it again).
    async fn refuse(&self, peer: SocketAddr, body: &[u8], reason: String) -> Answer {
        let record = InboundRecord {
            topic: DLQ_SOURCE.into(),
            partition: -1,
            offset: -1,
            key: Some(peer.to_string().into_bytes()),
            payload: body.to_vec(),
            timestamp_ms: Some(now_ms()),
            caught_up: true,
        };
        match tokio::time::timeout(self.send_timeout, self.dlq.send_reason(&record, &reason)).await
        {
            Ok(Ok(())) => Answer::new(StatusCode::BAD_REQUEST, reason),
            Ok(Err(e)) => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{reason}; dead-lettering it failed: {e}"),
            ),
            Err(_) => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{reason}; dead-lettering it got no acknowledgement within {:?}",
                    self.send_timeout
                ),
            ),
        }
    }

    /// Encodes and sends every batch keyed by node, and waits for Kafka's
    /// acknowledgements.
    async fn publish(&self, batches: Vec<TelemetryBatch>) -> Result<(), Answer> {
        let internal = |e: BusError| Answer::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        let mut records: Vec<(String, Vec<u8>)> = Vec::with_capacity(batches.len());
        for batch in batches {
            let mut size =
                |b: &TelemetryBatch| self.codec.encode(b).map_or(usize::MAX, |v| v.len());
            for part in split_to_fit(batch, self.max_record_bytes, &mut size) {
                let payload = self.codec.encode(&part).map_err(|e| internal(e.into()))?;
                if payload.len() > self.max_record_bytes {
                    tracing::warn!(node = %part.node, bytes = payload.len(), "one sample over kafka.max_record_bytes; dropped");
                    ::metrics::counter!(SAMPLES_SKIPPED.name, "reason" => "too_large").increment(1);
                    continue;
                }
                records.push((part.node, payload));
            }
        }
        let outbound: Vec<Outbound<'_>> = records
            .iter()
            .map(|(node, payload)| Outbound {
                topic: &self.telemetry_topic,
                partition: None,
                key: node.as_bytes(),
                payload,
            })
            .collect();
        match tokio::time::timeout(self.send_timeout, self.producer.send_all(&outbound)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Answer::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
            Err(_) => Err(Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "kafka: no acknowledgement within {:?} (remote_write.send_timeout_s)",
                    self.send_timeout
                ),
            )),
        }
    }
}

/// Refuses what is plainly not remote write 1.0; a missing header is fine
/// (curl, older senders), and so is any version 0.x or 1.x.
fn check_headers(headers: &HeaderMap) -> Option<Answer> {
    let text = |name| {
        headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
    };
    if let Some(encoding) = text(header::CONTENT_ENCODING)
        && !encoding.eq_ignore_ascii_case("snappy")
    {
        return Some(Answer::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Encoding `{encoding}`: only snappy is accepted"),
        ));
    }
    let v2 = text(header::CONTENT_TYPE).is_some_and(|t| t.contains("io.prometheus.write.v2"))
        || text(header::HeaderName::from_static(
            "x-prometheus-remote-write-version",
        ))
        .is_some_and(|v| v.starts_with("2."));
    if v2 {
        return Some(Answer::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "remote write 2.0 is not supported: send prometheus.WriteRequest (1.0)",
        ));
    }
    None
}

fn count_skipped(converted: &Converted) {
    for (reason, n) in [
        ("no_node", converted.no_node),
        ("no_name", converted.no_name),
    ] {
        if n > 0 {
            ::metrics::counter!(SERIES_SKIPPED.name, "reason" => reason).increment(n as u64);
        }
    }
    if converted.stale > 0 {
        ::metrics::counter!(SAMPLES_SKIPPED.name, "reason" => "stale")
            .increment(converted.stale as u64);
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
