//! The Prometheus endpoint every service serves, the typed registry every
//! crate declares its metrics in ([`Metric`]), and the metrics shared by
//! the I/O layer. Service-specific metrics are declared in their crates'
//! `METRICS` and all are listed in `docs/metrics.md`.

use std::net::SocketAddr;
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use dashmap::DashMap;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::error::BusError;

/// How a metric is recorded, and so how Prometheus sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// `counter!`: only grows.
    Counter,
    /// `gauge!`: set to the latest value.
    Gauge,
    /// `histogram!`: rendered as a summary, since the exporter configures
    /// no buckets (see `docs/metrics.md`).
    Histogram,
}

/// One exported metric: the only place its name, kind and help are written.
/// Call sites record under the const's `name`, never a literal, so each
/// crate's `METRICS` is the whole list that dashboards, alert rules and
/// docs are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The Prometheus name, `unicron_...`.
    pub name: &'static str,
    /// How it is recorded.
    pub kind: MetricKind,
    /// The `# HELP` text.
    pub help: &'static str,
}

impl Metric {
    /// A counter.
    pub const fn counter(name: &'static str, help: &'static str) -> Metric {
        Metric {
            name,
            kind: MetricKind::Counter,
            help,
        }
    }

    /// A gauge.
    pub const fn gauge(name: &'static str, help: &'static str) -> Metric {
        Metric {
            name,
            kind: MetricKind::Gauge,
            help,
        }
    }

    /// A histogram (rendered as a summary).
    pub const fn histogram(name: &'static str, help: &'static str) -> Metric {
        Metric {
            name,
            kind: MetricKind::Histogram,
            help,
        }
    }

    /// Gives the installed recorder this metric's kind and help text.
    pub fn describe(&self) {
        match self.kind {
            MetricKind::Counter => ::metrics::describe_counter!(self.name, self.help),
            MetricKind::Gauge => ::metrics::describe_gauge!(self.name, self.help),
            MetricKind::Histogram => ::metrics::describe_histogram!(self.name, self.help),
        }
    }
}

/// Describes every metric of a registry (a crate's `METRICS`).
pub fn describe_all(metrics: &[Metric]) {
    for metric in metrics {
        metric.describe();
    }
}

/// Records consumed, by topic.
pub const RECORDS_IN: Metric =
    Metric::counter("unicron_records_in_total", "Records consumed, by topic.");
/// Records produced (delivery confirmed), by topic.
pub const RECORDS_OUT: Metric = Metric::counter(
    "unicron_records_out_total",
    "Records produced and acknowledged, by topic.",
);
/// Records sent to the dead-letter topic, by source topic and service.
pub const DLQ_RECORDS: Metric = Metric::counter(
    "unicron_dlq_records_total",
    "Records sent to the dead-letter topic, by source topic and service.",
);
/// Records between a consumer's position and the partition's high
/// watermark at the latest fetch, by group, topic and partition.
pub const CONSUMER_LAG: Metric = Metric::gauge(
    "unicron_consumer_lag_records",
    "Records behind the partition's high watermark, by group, topic and partition.",
);
/// 1 while a service's consume loop runs, by service.
pub const SERVICE_READY: Metric = Metric::gauge(
    "unicron_service_ready",
    "1 while the service's consume loop runs, by service.",
);

/// The metrics the I/O layer records, in every service that uses it.
pub const METRICS: &[Metric] = &[
    RECORDS_IN,
    RECORDS_OUT,
    DLQ_RECORDS,
    CONSUMER_LAG,
    SERVICE_READY,
];

/// Services of this process and whether each is ready; `GET /readyz` is 200
/// only when every registered service is.
static READY: LazyLock<DashMap<&'static str, bool>> = LazyLock::new(DashMap::new);

/// Registers `service` as part of this process, not ready yet. Call it
/// before the service starts, so `/readyz` fails until it runs.
pub fn register(service: &'static str) {
    set_ready(service, false);
}

/// Marks `service` ready (its consume loop runs) or not (it stopped).
pub fn set_ready(service: &'static str, ready: bool) {
    READY.insert(service, ready);
    ::metrics::gauge!(SERVICE_READY.name, "service" => service).set(if ready { 1.0 } else { 0.0 });
}

/// Services that are registered and not ready; empty when the process is ready.
pub fn not_ready() -> Vec<&'static str> {
    let mut waiting: Vec<&'static str> = READY
        .iter()
        .filter(|entry| !*entry.value())
        .map(|entry| *entry.key())
        .collect();
    waiting.sort_unstable();
    waiting
}

/// Services of this process whose consumer group gave them partitions.
/// Readiness says the loop runs; this says it reads. `unicron up` holds the
/// simulated clock until the detector reads, because a simulated cluster
/// runs in real time and a detector that joined late would see its first
/// failures late and decide differently from one that did not.
static JOINED: LazyLock<DashMap<&'static str, bool>> = LazyLock::new(DashMap::new);

/// Records whether `service` holds partitions now.
pub fn set_joined(service: &'static str, joined: bool) {
    JOINED.insert(service, joined);
}

/// Whether `service` holds partitions now (false when unknown).
pub fn joined(service: &str) -> bool {
    JOINED.get(service).is_some_and(|entry| *entry.value())
}

/// Marks a service ready for as long as the guard lives.
pub struct ReadyGuard(&'static str);

impl ReadyGuard {
    pub fn new(service: &'static str) -> ReadyGuard {
        set_ready(service, true);
        ReadyGuard(service)
    }
}

impl Drop for ReadyGuard {
    fn drop(&mut self) {
        set_ready(self.0, false);
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once; later calls return
/// the same handle) and describes the shared metrics.
pub fn install() -> Result<PrometheusHandle, BusError> {
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| BusError::Metrics(e.to_string()))?;
    describe_all(METRICS);
    Ok(HANDLE.get_or_init(|| handle).clone())
}

fn readiness() -> (axum::http::StatusCode, String) {
    let waiting = not_ready();
    if waiting.is_empty() {
        (axum::http::StatusCode::OK, "ready\n".to_string())
    } else {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", waiting.join(", ")),
        )
    }
}

/// A running metrics endpoint.
pub struct MetricsServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `GET /metrics` (Prometheus text format), `GET /healthz` (liveness:
/// the process answers) and `GET /readyz` (readiness: every registered
/// service runs; 503 naming the others) on `addr` (port 0 picks a free
/// port; the bound address is returned).
pub async fn serve(addr: SocketAddr) -> Result<MetricsServer, BusError> {
    let handle = install()?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| BusError::Metrics(format!("cannot listen on {addr}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| BusError::Metrics(e.to_string()))?;
    let render = handle.clone();
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(render.render())))
        .route("/healthz", get(|| std::future::ready("ok\n")))
        .route("/readyz", get(|| std::future::ready(readiness())));
    let task = tokio::spawn(async move {
        let upkeep = async {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                handle.run_upkeep();
            }
        };
        tokio::select! {
            result = axum::serve(listener, app) => {
                if let Err(e) = result {
                    tracing::error!(error = %e, "metrics endpoint stopped");
                }
            }
            () = upkeep => {}
        }
    });
    Ok(MetricsServer { addr, task })
}
