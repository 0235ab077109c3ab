//! A pipeline's topic created after the detector started, at the default
//! `new_topic_check_s` (1 s): time from the
//! first record on it to the failure it carries being read from
//! `unicron.failures`. On the embedded broker (librdkafka's mock cluster)
//! and, when its jars are there, a three-broker Apache Kafka cluster.
//! `cargo bench -p unicron-tests --bench new_topic` prints one line per
//! topic and broker.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use tokio::sync::oneshot;
use unicron_bus::testing::kafka::{KafkaCluster, KafkaOptions, kafka_libs};
use unicron_bus::{Consumer, EmbeddedBroker, Producer};
use unicron_codec::formats::{ExternalInput, InputFormat, LabelMap};
use unicron_codec::{KafkaConfig, Topology};
use unicron_core::FailureEvent;
use unicron_detector::DetectorSettings;

/// Topics created one after another while the detector runs.
const TOPICS: [&str; 3] = ["pipeline_a", "pipeline_b", "pipeline_c"];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("| broker | topic | first record → failure read | target |");
    println!("|---|---|---:|---|");
    let embedded = EmbeddedBroker::start(1).unwrap();
    embedded
        .ensure_topics(&Topology::builtin(), &KafkaConfig::default().topic_prefix)
        .unwrap();
    measure("embedded", &Broker::Embedded(&embedded)).await;
    drop(embedded);
    match kafka_libs() {
        Some(libs) => {
            let dir = tempfile::tempdir().unwrap();
            let cluster = KafkaCluster::start(&libs, Some(dir.path()), &KafkaOptions::default())
                .unwrap_or_else(|e| panic!("{e}"));
            measure(
                "apache-kafka-3",
                &Broker::Kafka(cluster.bootstrap_servers()),
            )
            .await;
        }
        None => {
            println!("| apache-kafka-3 | skipped: no jars (./dev setup test fetches them) | | |")
        }
    }
}

/// Where topics are created: the embedded broker through its own call (its
/// mock cluster does not answer CreateTopics), Kafka through the admin API.
enum Broker<'a> {
    Embedded(&'a EmbeddedBroker),
    Kafka(String),
}

impl Broker<'_> {
    fn bootstrap(&self) -> String {
        match self {
            Broker::Embedded(b) => b.bootstrap_servers().to_string(),
            Broker::Kafka(b) => b.clone(),
        }
    }

    async fn create_topic(&self, topic: &str) {
        match self {
            Broker::Embedded(b) => {
                b.create_topic(topic, 1).unwrap();
            }
            Broker::Kafka(brokers) => {
                let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
                    .set("bootstrap.servers", brokers)
                    .create()
                    .unwrap();
                let created = admin
                    .create_topics(
                        &[NewTopic::new(topic, 1, TopicReplication::Fixed(3))],
                        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
                    )
                    .await
                    .unwrap();
                assert!(created.iter().all(Result::is_ok), "{created:?}");
            }
        }
    }
}

async fn measure(name: &str, broker: &Broker<'_>) {
    let kafka = KafkaConfig::default();
    let brokers = &broker.bootstrap();
    if let Broker::Kafka(_) = broker {
        unicron_bus::admin::ensure_topics(&kafka, brokers, &Topology::builtin())
            .await
            .unwrap();
    }
    let settings = DetectorSettings {
        inputs: TOPICS
            .iter()
            .map(|topic| ExternalInput {
                topic: topic.to_string(),
                format: InputFormat::FluentBitJson,
                signal: None,
                labels: LabelMap::default(),
                optional: true,
                cluster: None,
            })
            .collect(),
        ..DetectorSettings::default()
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = {
        let (kafka, brokers) = (kafka.clone(), brokers.to_string());
        tokio::spawn(async move {
            unicron_detector::run(&kafka, &brokers, settings.build().unwrap(), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        })
    };
    let failures = Consumer::new(&kafka, brokers, "bench-failures").unwrap();
    failures.subscribe(&[&kafka.topic("failures")]).unwrap();
    let producer = Producer::new(&kafka, brokers).unwrap();
    // The detector has joined its group with none of the topics there.
    tokio::time::sleep(Duration::from_secs(12)).await;

    for (i, topic) in TOPICS.iter().enumerate() {
        broker.create_topic(topic).await;
        let host = format!("late-host-{i}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let record = serde_json::json!({
            "@timestamp": now.as_secs_f64(),
            "log": "RuntimeError: CUDA error: an illegal memory access was encountered",
            "host": host,
        });
        let sent = Instant::now();
        producer
            .send_bytes(topic, host.as_bytes(), record.to_string().as_bytes())
            .await
            .unwrap();
        let got: Vec<FailureEvent> =
            unicron_bus::testing::read_records(&failures, 1, Duration::from_secs(120)).await;
        assert_eq!(got[0].node.as_deref(), Some(host.as_str()));
        let target = if name == "embedded" {
            "— (rebalances held, see below)"
        } else {
            "≤ 5 s"
        };
        println!(
            "| {name} | {topic} | {:.2} s | {target} |",
            sent.elapsed().as_secs_f64()
        );
    }
    unicron_bus::testing::stop_service(stop, task, Duration::from_secs(30)).await;
}
