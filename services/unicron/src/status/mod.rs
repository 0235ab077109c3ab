//! The status page for on-call engineers, served by `unicron up` and every
//! `unicron planner` at `[status] listen`: a list of clusters at a glance,
//! one cluster's nodes, jobs and WAF over time on demand, and incidents (one
//! per failure, newest first, with the decisions, commands and results it
//! caused and each command's explain chain). One HTML file with inline
//! script and style, no CDN: it works offline. The page polls the JSON API,
//! whose answers stay small with many clusters: summaries, one cluster's
//! detail, a page of incidents.
//! Explain chains come from an index in RocksDB (`[status] index_dir`) that
//! the reader fills as records arrive, so a click reads no log.
//! Beyond loopback every request but `/healthz` needs a token of
//! `[[status.tokens]]` (Bearer, or a browser's Basic prompt); a token bound
//! to clusters is answered about those clusters only.

mod feed;

use std::net::SocketAddr;
use std::path::Path as FsPath;
use std::sync::{Arc, Mutex};

use axum::Extension;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use unicron_access::{Gate, Grant, REALM, Scope};
use unicron_codec::KafkaConfig;
use unicron_core::planner::PlannerConfig;
use unicron_core::status::{ClusterSummary, ClusterView, Entry, INCIDENTS, Incident, StatusView};
use unicron_history::{Chain, ExplainIndex, TopicNames};

use crate::config::StatusConfig;

const PAGE: &str = include_str!("page.html");
/// Most timeline entries one poll returns.
const MAX_ENTRIES: usize = 500;
/// Incidents one poll returns unless it asks for another number.
const DEFAULT_INCIDENTS: usize = 100;

/// Where the status page listens, overriding `[status]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StatusArgs {
    /// Serve the status page on this address (default `status.listen`, 127.0.0.1:8080).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "no_status")]
    pub status: Option<std::net::SocketAddr>,
    /// Do not serve the status page.
    #[arg(long)]
    pub no_status: bool,
}

impl StatusArgs {
    /// The address to serve the page on, if any.
    pub fn listen(&self, config: &StatusConfig) -> Option<std::net::SocketAddr> {
        if self.no_status || (!config.enabled && self.status.is_none()) {
            None
        } else {
            Some(self.status.unwrap_or(config.listen))
        }
    }
}

#[derive(Clone)]
struct AppState {
    view: Arc<Mutex<StatusView>>,
    index: Arc<ExplainIndex>,
}

/// A running page; dropping it stops the server and the reader.
pub struct StatusServer {
    pub addr: SocketAddr,
    server: JoinHandle<()>,
    reader: JoinHandle<()>,
    gauges: JoinHandle<()>,
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.server.abort();
        self.reader.abort();
        self.gauges.abort();
    }
}

/// Sets `unicron_goodput_seconds` from the view every few seconds: each
/// job's split is computed from its facts, not on every record.
async fn goodput_gauges(view: Arc<Mutex<StatusView>>) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        every.tick().await;
        let splits = view
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .goodput()
            .splits();
        for ((cluster, job), split) in splits {
            for cause in unicron_core::goodput::CAUSES {
                ::metrics::gauge!(
                    unicron_planner::metrics::GOODPUT.name,
                    "cluster" => cluster.clone(),
                    "job" => job.clone(),
                    "cause" => cause,
                )
                .set(split.seconds(cause));
            }
        }
    }
}

impl StatusServer {
    /// Stops the page and waits until its Kafka reader is gone, so that a
    /// broker stopped next finds no client left to complain.
    pub async fn stop(mut self) {
        self.reader.abort();
        let _ = (&mut self.reader).await;
        self.server.abort();
    }
}

/// Starts the page on `listen`, reading the log at `brokers`, with its
/// explain index in `index_dir`. The shadow planner uses `tuning`, the
/// planner's own configuration.
pub async fn start(
    listen: SocketAddr,
    gate: Gate,
    kafka: &KafkaConfig,
    brokers: &str,
    tuning: PlannerConfig,
    index_dir: &FsPath,
) -> anyhow::Result<StatusServer> {
    let view = Arc::new(Mutex::new(StatusView::new(tuning)));
    let index = Arc::new(
        ExplainIndex::open(index_dir, TopicNames::new(kafka))
            .map_err(|e| crate::usage::UsageError(format!("status.index_dir: {e}")))?,
    );
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        crate::usage::UsageError(format!("status.listen: cannot listen on {listen}: {e}"))
    })?;
    let addr = listener.local_addr()?;
    let state = AppState {
        view: view.clone(),
        index: index.clone(),
    };
    let app = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/api/status", get(status))
        .route("/api/clusters/{id}", get(cluster))
        .route("/api/incidents", get(incidents))
        .route("/api/unclassified", get(unclassified))
        .route("/api/timeline", get(timeline))
        .route("/api/explain/{id}", get(explain_json))
        .route("/explain/{id}", get(explain_text))
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(Arc::new(gate), admit))
        // Outside the gate: liveness probes carry no token.
        .route("/healthz", get(|| async { "ok\n" }));
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "status page stopped");
        }
    });
    let gauges = tokio::spawn(goodput_gauges(view.clone()));
    let reader = tokio::spawn(feed::follow(
        kafka.clone(),
        brokers.to_string(),
        view,
        index,
    ));
    Ok(StatusServer {
        addr,
        server,
        reader,
        gauges,
    })
}

/// Lets a request in with its grant, or answers 401 with a challenge a
/// browser turns into a prompt.
async fn admit(State(gate): State<Arc<Gate>>, mut request: Request, next: Next) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match gate.check(authorization) {
        Ok(grant) => {
            let grant = grant.clone();
            request.extensions_mut().insert(grant);
            next.run(request).await
        }
        Err(denied) => {
            tracing::debug!(reason = denied.reason(), "status page request refused");
            (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    format!("Basic realm=\"{REALM}\", charset=\"UTF-8\""),
                )],
                format!("{denied}\n"),
            )
                .into_response()
        }
    }
}

#[derive(Serialize)]
struct StatusReply {
    /// Every cluster in summary form; `/api/clusters/{id}` has the rest.
    clusters: Vec<ClusterSummary>,
    last_seq: u64,
    /// Incidents kept, all clusters.
    incidents: usize,
    /// Detector instances holding their heartbeat and hang timers.
    detector_timers_held: Vec<String>,
}

async fn status(
    State(state): State<AppState>,
    Extension(grant): Extension<Grant>,
) -> Json<StatusReply> {
    let view = state.view.lock().unwrap_or_else(|e| e.into_inner());
    let mut clusters = view.summaries();
    clusters.retain(|c| grant.scope.allows(&c.id));
    Json(StatusReply {
        clusters,
        last_seq: view.last_seq(),
        incidents: match grant.scope {
            Scope::All => view.incident_log().len(),
            Scope::Clusters(_) => view
                .incidents(None, INCIDENTS)
                .iter()
                .filter(|i| grant.scope.allows(&i.cluster))
                .count(),
        },
        detector_timers_held: view.detector_timers_held(),
    })
}

async fn cluster(
    State(state): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
) -> Response {
    let view = state.view.lock().unwrap_or_else(|e| e.into_inner());
    // Another tenant's cluster is answered as one that does not exist.
    match view.cluster(&id).filter(|_| grant.scope.allows(&id)) {
        Some(cluster) => Json::<ClusterView>(cluster).into_response(),
        None => (StatusCode::NOT_FOUND, "no such cluster in the log\n").into_response(),
    }
}

#[derive(Deserialize)]
struct IncidentsQuery {
    #[serde(default)]
    cluster: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

async fn incidents(
    State(state): State<AppState>,
    Extension(grant): Extension<Grant>,
    Query(query): Query<IncidentsQuery>,
) -> Json<Vec<Incident>> {
    let limit = query.limit.unwrap_or(DEFAULT_INCIDENTS).min(INCIDENTS);
    let cluster = query.cluster.as_deref().filter(|c| !c.is_empty());
    let view = state.view.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = view.incidents(cluster, INCIDENTS);
    out.retain(|i| grant.scope.allows(&i.cluster));
    out.truncate(limit);
    Json(out)
}

/// Unclassified-error templates, newest first (`?cluster=&limit=`).
async fn unclassified(
    State(state): State<AppState>,
    Extension(grant): Extension<Grant>,
    Query(query): Query<IncidentsQuery>,
) -> Json<Vec<unicron_core::UnclassifiedTemplate>> {
    let limit = query.limit.unwrap_or(DEFAULT_INCIDENTS).min(MAX_ENTRIES);
    let cluster = query.cluster.as_deref().filter(|c| !c.is_empty());
    let view = state.view.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = view.unclassified(cluster, usize::MAX);
    out.retain(|t| grant.scope.allows(&t.cluster));
    out.truncate(limit);
    Json(out)
}

#[derive(Deserialize)]
struct TimelineQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    limit: Option<usize>,
}

async fn timeline(
    State(state): State<AppState>,
    Extension(grant): Extension<Grant>,
    Query(query): Query<TimelineQuery>,
) -> Json<Vec<Entry>> {
    let limit = query.limit.unwrap_or(MAX_ENTRIES).min(MAX_ENTRIES);
    let view = state.view.lock().unwrap_or_else(|e| e.into_inner());
    Json(view.timeline_after_of(query.after, limit, |c| grant.scope.allows(c)))
}

/// The chain from the index: what `unicron explain --from-kafka` prints
/// for the log read so far.
async fn chain(state: AppState, grant: &Grant, id: String) -> Result<Chain, Response> {
    let found = tokio::task::spawn_blocking(move || state.index.chain(&id)).await;
    match found {
        Ok(Ok(Some(chain))) if grant.scope.allows(&chain.command.cluster) => Ok(chain),
        Ok(Ok(_)) => Err((StatusCode::NOT_FOUND, "no such command in the log\n").into_response()),
        Ok(Err(e)) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()),
    }
}

async fn explain_json(
    State(state): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
) -> Response {
    match chain(state, &grant, id).await {
        Ok(chain) => Json(chain).into_response(),
        Err(response) => response,
    }
}

async fn explain_text(
    State(state): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
) -> Response {
    match chain(state, &grant, id).await {
        Ok(chain) => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            crate::explain::text(&chain),
        )
            .into_response(),
        Err(response) => response,
    }
}
