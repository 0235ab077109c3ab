//! `kube-watch`: one per Kubernetes cluster. Watches nodes, the watched
//! namespaces' pods and workloads (a watch with resume, relisting on
//! 410 Gone, never a poll) and publishes what the [`Tracker`] makes of
//! them. A watch that fails publishes nothing and is counted: the
//! cluster's state is unknown then, never healthy.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use unicron_bus::Producer;
use unicron_codec::{AvroCodec, KafkaConfig, Topic, Topics};
use unicron_core::{ClusterEvent, LogRecord};

use crate::client::Kube;
use crate::error::KubeError;
use crate::metrics::{BAD_OBJECTS, METRICS, PUBLISHED, WATCH_ERRORS, WATCH_EVENTS};
use crate::settings::WatchSettings;
use crate::tracker::{Record, Tracker};
use crate::workload::WorkloadKind;

/// What one of the watches said (objects boxed: they are large and many).
enum Seen {
    Node(Box<Event<Node>>),
    Pod(String, Box<Event<Pod>>),
    Workload(WorkloadKind, String, Box<Event<DynamicObject>>),
    Failed(String, String),
}

type Watch = Pin<Box<dyn Stream<Item = Seen> + Send>>;

fn watch<K>(api: Api<K>, what: String, wrap: impl Fn(Event<K>) -> Seen + Send + 'static) -> Watch
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .map(move |item| match item {
            Ok(event) => wrap(event),
            Err(error) => Seen::Failed(what.clone(), error.to_string()),
        })
        .boxed()
}

/// Watches until `stop` completes.
pub async fn run_watcher(
    settings: &WatchSettings,
    kafka: &KafkaConfig,
    brokers: &str,
    stop: impl Future<Output = ()>,
) -> Result<(), KubeError> {
    unicron_bus::metrics::describe_all(METRICS);
    let kube = Kube::connect(&settings.api()).await?;
    let producer = Producer::new(kafka, brokers)
        .map_err(|e| KubeError::Config(format!("kafka producer: {e}")))?;
    unicron_bus::admin::ensure_cluster_topics(kafka, brokers, &settings.cluster)
        .await
        .map_err(|e| KubeError::Config(format!("kafka topics of the cluster: {e}")))?;
    let topics = Topics::bound(kafka, &settings.cluster);
    let cluster_topic = topics.name(Topic::Cluster).to_string();
    let logs_topic = topics.name(Topic::Logs).to_string();
    let cluster_codec = AvroCodec::<ClusterEvent>::default();
    let log_codec = AvroCodec::<LogRecord>::default();

    tokio::pin!(stop);
    // Until the API server answers: unknown, nothing published.
    let served = loop {
        match served_kinds(&kube).await {
            Ok(served) => break served,
            Err(error) if error.passing() => {
                tracing::warn!(%error, "API server not answering; nothing published until it does");
                ::metrics::counter!(WATCH_ERRORS.name, "what" => "discovery").increment(1);
                tokio::select! {
                    _ = &mut stop => return Ok(()),
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                }
            }
            Err(error) => return Err(error),
        }
    };
    let mut watches: Vec<Watch> = vec![watch(
        Api::<Node>::all(kube.client.clone()),
        "nodes".into(),
        |e| Seen::Node(Box::new(e)),
    )];
    for namespace in &settings.namespaces {
        let ns = namespace.clone();
        watches.push(watch(
            Api::<Pod>::namespaced(kube.client.clone(), namespace),
            format!("pods in {namespace}"),
            move |e| Seen::Pod(ns.clone(), Box::new(e)),
        ));
        for kind in WorkloadKind::ALL {
            if !served.contains(&kind) {
                continue;
            }
            let ns = namespace.clone();
            watches.push(watch(
                Api::<DynamicObject>::namespaced_with(
                    kube.client.clone(),
                    namespace,
                    &kind.api_resource(),
                ),
                format!("{} in {namespace}", kind.name()),
                move |e| Seen::Workload(kind, ns.clone(), Box::new(e)),
            ));
        }
    }
    let mut seen = futures::stream::select_all(watches);
    let mut tracker = Tracker::new(settings.clone());
    loop {
        let item = tokio::select! {
            _ = &mut stop => return Ok(()),
            item = seen.next() => item,
        };
        let Some(item) = item else { return Ok(()) };
        let now_ms = wall_ms();
        let records = match item {
            Seen::Node(event) => {
                counted("nodes", &event);
                tracker.node(*event, now_ms)
            }
            Seen::Pod(namespace, event) => {
                counted("pods", &event);
                tracker.pod(&namespace, *event, now_ms)
            }
            Seen::Workload(kind, namespace, event) => {
                counted(kind.name(), &event);
                let (records, bad) = tracker.workload(kind, &namespace, *event, now_ms);
                for line in bad {
                    tracing::warn!("{line}");
                    ::metrics::counter!(BAD_OBJECTS.name).increment(1);
                }
                records
            }
            Seen::Failed(what, error) => {
                // A kind whose API is not served (no JobSet CRD) fails the
                // same way every time: said at debug level after the first.
                tracing::warn!(watch = %what, %error, "watch failed; state unknown, nothing published");
                ::metrics::counter!(WATCH_ERRORS.name, "what" => what).increment(1);
                Vec::new()
            }
        };
        for record in records {
            // Never dropped: a record not delivered is sent again until it
            // is, or until the stop.
            loop {
                let sent = match &record {
                    Record::Cluster(event) => {
                        let key = topics.key_str(Topic::Cluster, &event.cluster);
                        producer
                            .send(&cluster_topic, &key, event, &cluster_codec)
                            .await
                    }
                    Record::Log(log) => {
                        let key = topics.key_str(Topic::Logs, &log.node);
                        producer.send(&logs_topic, &key, log, &log_codec).await
                    }
                };
                match sent {
                    Ok(_) => {
                        tracing::info!(kind = record.kind(), ?record, "published");
                        ::metrics::counter!(PUBLISHED.name, "kind" => record.kind()).increment(1);
                        break;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "not delivered; sending again");
                        tokio::select! {
                            _ = &mut stop => return Ok(()),
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                }
            }
        }
    }
}

/// The workload kinds whose API the server serves: a cluster without the
/// JobSet or the training operator's CRD is not watched for them (a CRD
/// installed later is watched after a restart of kube-watch).
async fn served_kinds(kube: &Kube) -> Result<Vec<WorkloadKind>, KubeError> {
    let mut served = Vec::new();
    for kind in WorkloadKind::ALL {
        let resource = kind.api_resource();
        // Discovery, which every authenticated identity may read: no list
        // right beyond the watched namespaces is needed.
        match kube
            .call(
                "discover",
                &resource.api_version,
                kube.client.list_api_group_resources(&resource.api_version),
            )
            .await
        {
            Ok(list) if list.resources.iter().any(|r| r.name == resource.plural) => {
                served.push(kind)
            }
            Ok(_) => {
                tracing::info!(
                    kind = kind.name(),
                    "not served by this API server: not watched"
                );
            }
            Err(e) if e.code() == Some(404) => {
                tracing::info!(
                    kind = kind.name(),
                    "not served by this API server (no CRD): not watched"
                );
            }
            Err(e) => return Err(e),
        }
    }
    Ok(served)
}

fn counted<K>(what: &'static str, event: &Event<K>) {
    if matches!(
        event,
        Event::Apply(_) | Event::InitApply(_) | Event::Delete(_)
    ) {
        ::metrics::counter!(WATCH_EVENTS.name, "what" => what).increment(1);
    }
}

/// This host's time: what the Slurm poller stamps its events with too.
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
