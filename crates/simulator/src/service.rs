//! The simulator's I/O: a clock that advances the model at `speed` times
//! real time and publishes what it emits, the action endpoint executors
//! call, and a reader of `unicron.failures` for the ground truth.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::future::join_all;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use unicron_bus::{BusError, Consumer, Producer};
use unicron_codec::schemas::AvroRecord;
use unicron_codec::{AvroCodec, KafkaConfig, Topic, Topics};
use unicron_core::FailureEvent;
use unicron_core::executor::{ActionRequest, ActionResponse};

use crate::config::SimConfig;
use crate::model::{Emission, Sim};
use crate::truth::Summary;

/// How often the clock wakes up, real time.
const WAKE: Duration = Duration::from_millis(20);

/// Longest real time the clock waits for the control plane to place the jobs.
const PLACEMENT_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("sim.listen: cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("simulator task: {0}")]
    Task(String),
}

/// A live view for progress displays.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub sim_s: f64,
    pub injected: u64,
    pub detected: u64,
    pub acted_on: u64,
    pub commands: u64,
    /// Weighted FLOP/s now, as a fraction of the ideal.
    pub waf_now: f64,
    /// Accumulated WAF so far, as a fraction of the ideal.
    pub waf_fraction: f64,
    /// The clock reached the end of the run.
    pub ended: bool,
}

struct Shared {
    sim: Mutex<Sim>,
    ended: watch::Sender<bool>,
}

impl Shared {
    fn sim(&self) -> MutexGuard<'_, Sim> {
        self.sim.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running simulator.
pub struct Running {
    /// Where `POST /actions` is served.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Result<(), SimError>>>,
}

/// Starts the simulator: binds the action endpoint, then runs the clock
/// until `end_s` simulated seconds (or forever) and reads failures.
/// `wait_for`: services of this process (by runtime service name) the
/// clock waits for until they hold partitions, beside the jobs being
/// placed; `unicron up` names the detector.
pub async fn start(
    kafka: &KafkaConfig,
    brokers: &str,
    config: SimConfig,
    end_s: Option<f64>,
    wait_for: Vec<&'static str>,
) -> Result<Running, SimError> {
    config.validate().map_err(SimError::Config)?;
    let trace = config.load_trace().map_err(SimError::Config)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| SimError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| SimError::Listen {
        addr: config.listen,
        source,
    })?;
    let producer = Producer::new(kafka, brokers)?;
    let failures = Consumer::new(kafka, brokers, &format!("unicron-sim.{}", config.cluster))?;
    failures.subscribe(&[Topics::new(kafka).name(Topic::Failures)])?;

    let (stop, stopped) = watch::channel(false);
    let (ended, _) = watch::channel(false);
    let speed = config.speed;
    // The simulated cluster's writers: its own topics when clusters have them.
    let topics = Topics::bound(kafka, &config.cluster);
    let end_ms = end_s.map(|s| config.start_ms + (s * 1000.0) as i64);
    let shared = Arc::new(Shared {
        sim: Mutex::new(Sim::new(config, trace)),
        ended,
    });

    let app = Router::new()
        .route("/actions", post(action))
        .route("/truth", get(truth))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(shared.clone());
    let mut http_stop = stopped.clone();
    let http = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = http_stop.wait_for(|s| *s).await;
            })
            .await
            .map_err(|e| SimError::Task(format!("action endpoint: {e}")))
    });
    let clock = tokio::spawn(run_clock(
        shared.clone(),
        producer,
        topics,
        speed,
        end_ms,
        wait_for,
        stopped.clone(),
    ));
    let reader = tokio::spawn(read_failures(shared.clone(), failures, stopped));
    tracing::info!(%addr, "simulator running");
    Ok(Running {
        addr,
        shared,
        stop,
        tasks: vec![http, clock, reader],
    })
}

impl Running {
    pub fn progress(&self) -> Progress {
        let sim = self.shared.sim();
        let truth = sim.truth();
        let ideal = truth.ideal_rate();
        Progress {
            sim_s: truth.elapsed_s(),
            injected: truth.faults.len() as u64,
            detected: truth
                .faults
                .iter()
                .filter(|f| f.detected_ms.is_some())
                .count() as u64,
            acted_on: truth
                .faults
                .iter()
                .filter(|f| f.resolved_ms.is_some())
                .count() as u64,
            commands: truth.actions.values().sum(),
            waf_now: if ideal > 0.0 {
                sim.current_rate() / ideal
            } else {
                0.0
            },
            waf_fraction: truth.waf_fraction(),
            ended: *self.shared.ended.borrow(),
        }
    }

    /// Resolves when the clock reached the end of the run.
    pub async fn ended(&self) {
        let mut ended = self.shared.ended.subscribe();
        let _ = ended.wait_for(|e| *e).await;
    }

    pub fn summary(&self) -> Summary {
        let sim = self.shared.sim();
        Summary::new(sim.truth(), sim.config(), sim.downtime_s())
    }

    /// Stops every task and returns the final summary.
    pub async fn stop(self) -> Result<Summary, SimError> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.await.map_err(|e| SimError::Task(e.to_string()))??;
        }
        let sim = self.shared.sim();
        Ok(Summary::new(sim.truth(), sim.config(), sim.downtime_s()))
    }
}

async fn action(
    State(shared): State<Arc<Shared>>,
    Json(request): Json<ActionRequest>,
) -> Json<ActionResponse> {
    let answer = shared.sim().act(&request);
    tracing::info!(command = %request.command_id, action = ?request.action, status = ?answer.status, "action");
    Json(answer)
}

async fn truth(State(shared): State<Arc<Shared>>) -> Json<Summary> {
    let sim = shared.sim();
    Json(Summary::new(sim.truth(), sim.config(), sim.downtime_s()))
}

/// An emission as a record of the one topic its type belongs to, with
/// its key as written there.
fn encode<'t>(
    topics: &'t Topics,
    emission: &Emission,
) -> Result<(&'t str, String, Vec<u8>), BusError> {
    fn record<'t, T: AvroRecord>(
        topics: &'t Topics,
        record: &T,
        key: &str,
    ) -> Result<(&'t str, String, Vec<u8>), BusError> {
        Ok((
            topics.of::<T>(),
            topics.key_str(unicron_codec::Topic::carrying(T::RECORD), key),
            AvroCodec::<T>::default().encode(record)?,
        ))
    }
    let key = emission.key();
    match emission {
        Emission::Telemetry(r) => record(topics, r, key),
        Emission::Log(r) => record(topics, r, key),
        Emission::Agent(r) => record(topics, r, key),
        Emission::Cluster(r) => record(topics, r, key),
    }
}

/// Simulated time follows real time × speed, one tick at a time; the
/// sequence of ticks does not depend on how the wake-ups fall.
async fn run_clock(
    shared: Arc<Shared>,
    producer: Producer,
    topics: Topics,
    speed: f64,
    end_ms: Option<i64>,
    wait_for: Vec<&'static str>,
    mut stopped: watch::Receiver<bool>,
) -> Result<(), SimError> {
    let start_ms = shared.sim().now_ms();
    // Announce the cluster, then hold the clock until its jobs are placed
    // and the services named read: simulated time runs in real time, so
    // what joins late would see the cluster late.
    let announced = shared.sim().advance_to(start_ms);
    publish(&producer, &topics, &announced).await?;
    let holding = Instant::now();
    let waiting =
        || !shared.sim().jobs_placed() || !wait_for.iter().all(|s| unicron_bus::metrics::joined(s));
    while waiting() {
        if holding.elapsed() > PLACEMENT_WAIT {
            tracing::warn!(
                ?wait_for,
                "jobs not placed or services not reading after {PLACEMENT_WAIT:?}; starting the clock anyway"
            );
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(WAKE) => {}
            _ = stopped.wait_for(|s| *s) => return Ok(()),
        }
    }
    let started = Instant::now();
    loop {
        let mut target = start_ms + (started.elapsed().as_secs_f64() * speed * 1000.0) as i64;
        if let Some(end) = end_ms {
            target = target.min(end);
        }
        let emissions = shared.sim().advance_to(target);
        publish(&producer, &topics, &emissions).await?;
        if end_ms.is_some_and(|end| shared.sim().now_ms() >= end) {
            let _ = shared.ended.send(true);
        }
        tokio::select! {
            () = tokio::time::sleep(WAKE) => {}
            _ = stopped.wait_for(|s| *s) => return Ok(()),
        }
    }
}

/// Sends a tick's records concurrently and waits for every delivery.
async fn publish(
    producer: &Producer,
    topics: &Topics,
    emissions: &[Emission],
) -> Result<(), SimError> {
    let mut sends = Vec::with_capacity(emissions.len());
    for emission in emissions {
        sends.push(encode(topics, emission)?);
    }
    let results = join_all(
        sends
            .iter()
            .map(|(topic, key, payload)| producer.send_bytes(topic, key.as_bytes(), payload)),
    )
    .await;
    for result in results {
        result?;
    }
    Ok(())
}

async fn read_failures(
    shared: Arc<Shared>,
    consumer: Consumer,
    mut stopped: watch::Receiver<bool>,
) -> Result<(), SimError> {
    let codec = AvroCodec::<FailureEvent>::default();
    loop {
        let record = tokio::select! {
            record = consumer.recv() => record?,
            _ = stopped.wait_for(|s| *s) => return Ok(()),
        };
        match codec.decode(&record.payload) {
            Ok(failure) => shared.sim().observe_failure(&failure),
            Err(e) => {
                tracing::warn!(offset = record.offset, error = %e, "unreadable failure record")
            }
        }
        consumer.mark_done(&record.topic, record.partition, record.offset)?;
    }
}
