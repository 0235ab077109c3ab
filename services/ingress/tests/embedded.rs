//! The ingress on the embedded broker: clusters' own topics in, the
//! shared topics and the dead-letter topic out.

use std::time::Duration;

use unicron_bus::testing::{read_records, stop_service};
use unicron_bus::{Consumer, EmbeddedBroker, Producer};
use unicron_codec::{AvroCodec, KafkaConfig, Topic, Topics, Topology};
use unicron_core::{ClusterEvent, ClusterEventKind, DeadLetter, LogRecord};
use unicron_ingress::IngressSettings;

const WAIT: Duration = Duration::from_secs(30);

/// An embedded broker with the shared topics and clusters a's and b's own,
/// and a configuration with clusters' own topics on.
fn broker_with_clusters_a_and_b() -> (EmbeddedBroker, KafkaConfig) {
    let broker = EmbeddedBroker::start(1).unwrap();
    let mut kafka = KafkaConfig {
        cluster_topics: true,
        ..KafkaConfig::default()
    };
    kafka.properties.insert(
        "session.timeout.ms".into(),
        unicron_codec::config::PropertyValue::Int(6000),
    );
    let topology = Topology::builtin();
    for t in [
        topology.clone(),
        topology.of_cluster("a"),
        topology.of_cluster("b"),
    ] {
        broker.ensure_topics(&t, &kafka.topic_prefix).unwrap();
    }
    (broker, kafka)
}

fn node_down(cluster: &str, node: &str, time_ms: i64) -> ClusterEvent {
    let mut event = ClusterEvent::new(cluster, time_ms, ClusterEventKind::NodeDown);
    event.node = Some(node.into());
    event
}

/// Cluster a's writer publishes its own node_down and, forged, one of
/// cluster b's and an Xid line "from" b's node; b publishes its own. Only
/// the two genuine ones reach the shared topics; the forgeries are dead
/// letters that say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_pass_on_for_their_own_cluster_and_forgeries_are_dead_lettered() {
    let (broker, kafka) = broker_with_clusters_a_and_b();
    let brokers = broker.bootstrap_servers().to_string();

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn({
        let (kafka, brokers) = (kafka.clone(), brokers.clone());
        async move {
            unicron_ingress::run(&kafka, &brokers, &IngressSettings::default(), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        }
    });

    let producer = Producer::new(&kafka, &brokers).unwrap();
    let (a, b) = (Topics::bound(&kafka, "a"), Topics::bound(&kafka, "b"));
    let events = AvroCodec::<ClusterEvent>::default();
    let t0 = 1_767_225_600_000;
    let send_event = |topics: &Topics, event: ClusterEvent| {
        let payload = events.encode(&event).unwrap();
        let topic = topics.of::<ClusterEvent>().to_string();
        let key = topics.key(Topic::Cluster, event.cluster.as_bytes());
        let producer = producer.clone();
        async move {
            producer.send_bytes(&topic, &key, &payload).await.unwrap();
        }
    };
    send_event(&a, node_down("a", "a-n1", t0)).await;
    send_event(&a, node_down("b", "b-n1", t0 + 1)).await;
    let xid = LogRecord {
        cluster: "b".into(),
        node: "b-n2".into(),
        time_ms: t0 + 2,
        source: "kernel".into(),
        job: None,
        rank: None,
        gpu: None,
        line: "NVRM: Xid (PCI:0000:07:00): 79, pid=1, GPU has fallen off the bus.".into(),
        attributes: Default::default(),
    };
    producer
        .send_bytes(
            a.of::<LogRecord>(),
            &a.key(Topic::Logs, b"b-n2"),
            &AvroCodec::<LogRecord>::default().encode(&xid).unwrap(),
        )
        .await
        .unwrap();
    send_event(&b, node_down("b", "b-n3", t0 + 3)).await;

    let shared = Topics::new(&kafka);
    let cluster_reader = Consumer::new(&kafka, &brokers, "t-cluster").unwrap();
    cluster_reader
        .subscribe(&[shared.name(Topic::Cluster)])
        .unwrap();
    let mut passed: Vec<(String, Option<String>)> =
        read_records::<ClusterEvent>(&cluster_reader, 2, WAIT)
            .await
            .into_iter()
            .map(|e| (e.cluster, e.node))
            .collect();
    passed.sort();
    assert_eq!(
        passed,
        vec![
            ("a".to_string(), Some("a-n1".to_string())),
            ("b".to_string(), Some("b-n3".to_string()))
        ]
    );
    let dlq = Consumer::new(&kafka, &brokers, "t-dlq").unwrap();
    dlq.subscribe(&[shared.name(Topic::Dlq)]).unwrap();
    let letters = read_records::<DeadLetter>(&dlq, 2, WAIT).await;
    for letter in &letters {
        assert_eq!(letter.source_topic, "unicron.in.a");
    }
    for letter in &letters {
        assert!(
            letter
                .error
                .starts_with("foreign_cluster: a record of cluster \"b\""),
            "{}",
            letter.error
        );
    }
    let logs = Consumer::new(&kafka, &brokers, "t-logs").unwrap();
    logs.subscribe(&[shared.name(Topic::Logs)]).unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), logs.recv())
            .await
            .is_err(),
        "the forged Xid line reached the shared logs topic"
    );
    stop_service(stop, task, WAIT).await;
}

/// Cluster a floods its logs topic far beyond its budget while b sends a
/// few lines: b's all pass, a's pass up to its saved-up burst and rate,
/// and the rest are dropped, not dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_cut_to_its_clusters_budget_and_the_others_pass() {
    let (broker, kafka) = broker_with_clusters_a_and_b();
    let brokers = broker.bootstrap_servers().to_string();
    let settings = IngressSettings {
        budget: unicron_core::ingress_budget::BudgetConfig {
            records_per_s: 10.0,
            bytes_per_s: 0.0,
            burst_s: 2.0,
        },
        ..IngressSettings::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn({
        let (kafka, brokers) = (kafka.clone(), brokers.clone());
        async move {
            unicron_ingress::run(&kafka, &brokers, &settings, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        }
    });
    let producer = Producer::new(&kafka, &brokers).unwrap();
    let codec = AvroCodec::<LogRecord>::default();
    let line = |cluster: &str, i: i64| LogRecord {
        cluster: cluster.into(),
        node: format!("{cluster}-n1"),
        time_ms: 1_767_225_600_000 + i,
        source: "app".into(),
        job: None,
        rank: None,
        gpu: None,
        line: format!("INFO step {i} loss 2.31"),
        attributes: Default::default(),
    };
    let flood: Vec<Vec<u8>> = (0..500)
        .map(|i| codec.encode(&line("a", i)).unwrap())
        .collect();
    let a = Topics::bound(&kafka, "a");
    let a_topic = a.of::<LogRecord>().to_string();
    let a_key = a.key(Topic::Logs, b"a-n1");
    let outbound: Vec<unicron_bus::Outbound<'_>> = flood
        .iter()
        .map(|payload| unicron_bus::Outbound {
            topic: &a_topic,
            partition: None,
            key: &a_key,
            payload,
        })
        .collect();
    producer.send_all(&outbound).await.unwrap();
    let b = Topics::bound(&kafka, "b");
    let b_topic = b.of::<LogRecord>().to_string();
    for i in 0..5 {
        producer
            .send_bytes(
                &b_topic,
                &b.key(Topic::Logs, b"b-n1"),
                &codec.encode(&line("b", i)).unwrap(),
            )
            .await
            .unwrap();
    }
    let shared = Topics::new(&kafka).name(Topic::Logs).to_string();
    let reader = Consumer::new(&kafka, &brokers, "t-logs").unwrap();
    reader.subscribe(&[&shared]).unwrap();
    let mut by_cluster = std::collections::BTreeMap::<String, usize>::new();
    while by_cluster.get("b").copied().unwrap_or(0) < 5 {
        let record = tokio::time::timeout(WAIT, reader.recv())
            .await
            .expect("b's lines pass")
            .unwrap();
        *by_cluster
            .entry(codec.decode(&record.payload).unwrap().cluster)
            .or_default() += 1;
    }
    // Whatever of a's is still on its way arrives within a second.
    while let Ok(Ok(record)) = tokio::time::timeout(Duration::from_secs(2), reader.recv()).await {
        *by_cluster
            .entry(codec.decode(&record.payload).unwrap().cluster)
            .or_default() += 1;
    }
    let a = by_cluster.get("a").copied().unwrap_or(0);
    // 20 saved up, plus 10 a second while the flood was read.
    assert!((20..=60).contains(&a), "{a} of a's 500 passed");
    let dlq = unicron_bus::whole_topic::read_topic(
        &kafka,
        &brokers,
        Topics::new(&kafka).name(Topic::Dlq),
    )
    .unwrap();
    assert!(dlq.is_empty(), "dropped records are not dead letters");
    stop_service(stop, task, WAIT).await;
}
