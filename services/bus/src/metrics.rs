//! The Prometheus endpoint every service serves, and the metric names shared
//! by the I/O layer. Service-specific metrics are named in their crates and
//! all are listed in `docs/metrics.md`.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::error::BusError;

/// Records consumed, by topic.
pub const RECORDS_IN: &str = "unicron_records_in_total";
/// Records produced (delivery confirmed), by topic.
pub const RECORDS_OUT: &str = "unicron_records_out_total";
/// Records sent to the dead-letter topic, by source topic and service.
pub const DLQ_RECORDS: &str = "unicron_dlq_records_total";

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
    metrics::describe_counter!(RECORDS_IN, "Records consumed, by topic.");
    metrics::describe_counter!(RECORDS_OUT, "Records produced and acknowledged, by topic.");
    metrics::describe_counter!(
        DLQ_RECORDS,
        "Records sent to the dead-letter topic, by source topic and service."
    );
    Ok(HANDLE.get_or_init(|| handle).clone())
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

/// Serves `GET /metrics` (Prometheus text format) and `GET /healthz` on
/// `addr` (port 0 picks a free port; the bound address is returned).
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
        .route("/healthz", get(|| std::future::ready("ok\n")));
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
