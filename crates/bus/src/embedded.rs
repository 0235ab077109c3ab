//! The embedded broker: librdkafka's mock cluster (real Kafka protocol on
//! loopback) hosted by this process, so `unicron up` needs no set-up.
//!
//! Limits that shape everything using it (docs/design.md §5): at most 5 MB or
//! 100,000 batches per partition before the oldest are dropped, no
//! CreateTopics request (topics are made through the mock API here), no
//! transactions.

use std::collections::BTreeSet;
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;

use rdkafka::mocking::MockCluster;
use rdkafka::types::RDKafkaRespErr;

use crate::admin::{TopicReport, TopicStatus};
use crate::error::BusError;
use unicron_codec::topology::Topology;

/// Replication factor of embedded topics: one copy is all a single process can offer.
const EMBEDDED_REPLICATION: i32 = 1;

/// Bootstrap lists of the embedded brokers this process hosts.
static HOSTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Whether `brokers` is an embedded broker of this process. Its clients
/// fetch differently: the mock cluster holds an empty fetch for the whole
/// `fetch.wait.max.ms` instead of answering when a record arrives.
pub fn hosted_here(brokers: &str) -> bool {
    HOSTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(brokers)
}

enum Request {
    CreateTopic {
        name: String,
        partitions: i32,
        reply: mpsc::Sender<Result<TopicStatus, String>>,
    },
}

/// A running mock cluster. The mock handle is not `Send`, so a dedicated
/// thread owns it; this handle talks to that thread and is `Send + Sync`.
/// Dropping it stops the broker.
pub struct EmbeddedBroker {
    bootstrap: String,
    requests: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl EmbeddedBroker {
    /// Starts a mock cluster of `brokers` brokers on loopback.
    pub fn start(brokers: i32) -> Result<EmbeddedBroker, BusError> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
        let (req_tx, req_rx) = mpsc::channel::<Request>();
        let thread = std::thread::Builder::new()
            .name("embedded-broker".into())
            .spawn(move || {
                let cluster = match MockCluster::new(brokers) {
                    Ok(cluster) => cluster,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(cluster.bootstrap_servers()));
                // Runs until every handle is dropped.
                for request in req_rx {
                    match request {
                        Request::CreateTopic {
                            name,
                            partitions,
                            reply,
                        } => {
                            let outcome = match cluster.create_topic(
                                &name,
                                partitions,
                                EMBEDDED_REPLICATION,
                            ) {
                                Ok(()) => Ok(TopicStatus::Created),
                                Err(e)
                                    if e.rdkafka_error_code()
                                        == Some(
                                            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS
                                                .into(),
                                        ) =>
                                {
                                    Ok(TopicStatus::Exists)
                                }
                                Err(e) => Err(e.to_string()),
                            };
                            let _ = reply.send(outcome);
                        }
                    }
                }
            })
            .map_err(|e| BusError::Embedded(format!("cannot start thread: {e}")))?;
        let bootstrap = ready_rx
            .recv()
            .map_err(|_| BusError::Embedded("broker thread died".into()))?
            .map_err(BusError::Embedded)?;
        HOSTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(bootstrap.clone());
        Ok(EmbeddedBroker {
            bootstrap,
            requests: Some(req_tx),
            thread: Some(thread),
        })
    }

    /// `host:port` list for clients, e.g. `127.0.0.1:40123`.
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap
    }

    /// Creates one topic; an existing topic is reported, not an error.
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<TopicStatus, BusError> {
        let (reply, answer) = mpsc::channel();
        self.requests
            .as_ref()
            .expect("requests live until drop")
            .send(Request::CreateTopic {
                name: name.to_string(),
                partitions,
                reply,
            })
            .map_err(|_| BusError::Embedded("broker thread is gone".into()))?;
        answer
            .recv()
            .map_err(|_| BusError::Embedded("broker thread is gone".into()))?
            .map_err(|reason| BusError::Topic {
                topic: name.to_string(),
                reason,
            })
    }

    /// Creates every topic of `topology` (names with `prefix`) that is missing.
    pub fn ensure_topics(
        &self,
        topology: &Topology,
        prefix: &str,
    ) -> Result<Vec<TopicReport>, BusError> {
        topology
            .topics
            .iter()
            .map(|spec| {
                let name = format!("{prefix}{}", spec.name);
                let status = self.create_topic(&name, spec.partitions)?;
                Ok(TopicReport {
                    name,
                    partitions: spec.partitions,
                    replicas: 1,
                    status,
                })
            })
            .collect()
    }
}

impl Drop for EmbeddedBroker {
    fn drop(&mut self) {
        HOSTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.bootstrap);
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
