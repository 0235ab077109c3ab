//! Follows the five control-plane topics and the detector's rounds from
//! their beginning into the status view, and those and the detector's own topics (the sources an
//! explain cites) into the explain index. It reads outside any consumer
//! group and commits nothing, so it never takes partitions from a service.
//! Undecodable records are skipped here: the services that own those topics
//! dead-letter them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use unicron_bus::Consumer;
use unicron_bus::consumer::InboundRecord;
use unicron_codec::KafkaConfig;
use unicron_codec::config::PropertyValue;
use unicron_core::status::{Read, Record, StatusView};
use unicron_history::{Decoded, Decoder, ExplainIndex, Indexed};

/// Group id the reader's client carries; it never joins the group.
const READER: &str = "unicron-status";
/// Records one index write takes at most.
const BATCH: usize = 512;
/// How long a fetch of the detector's topics may wait for records, ms.
const SOURCE_FETCH_WAIT_MS: &str = "500";

/// Reads into `view` and `index` until the task is dropped. Broker errors
/// are logged and retried: the page must outlive a broker restart.
pub async fn follow(
    kafka: KafkaConfig,
    brokers: String,
    view: Arc<Mutex<StatusView>>,
    index: Arc<ExplainIndex>,
) {
    let decoder = Decoder::new(&kafka);
    let rounds = decoder.names().rounds.clone();
    let mut followed = decoder.control_plane_topics().to_vec();
    // The detector's rounds say whether its timers are held; a deployment
    // older than the topic has none, and the page goes on without it.
    followed.push(&rounds);
    let control = loop {
        match reader(&kafka, &brokers, &followed) {
            Ok((consumer, missing)) if missing.iter().all(|t| *t == rounds) => break consumer,
            Ok((_, missing)) => {
                let missing = missing.join(", ");
                tracing::warn!(missing, "status page: waiting for the control-plane topics");
            }
            Err(e) => {
                tracing::warn!(error = %e, "status page: waiting for the control-plane topics")
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    // The detector's topics carry most of the traffic and only feed the
    // index: a reader of its own that waits for full fetches, where the
    // control plane's asks every few milliseconds.
    let mut patient = kafka.clone();
    patient.properties.insert(
        "fetch.wait.max.ms".into(),
        PropertyValue::Text(SOURCE_FETCH_WAIT_MS.into()),
    );
    let sources = match reader(&patient, &brokers, &decoder.source_topics()) {
        Ok((consumer, _)) => Some(consumer),
        Err(e) => {
            tracing::warn!(error = %e, "status page: explains will show no source records");
            None
        }
    };
    // Decoding and RocksDB writes run on their own thread, off the runtime
    // the services of `unicron up` share; the bounded channel holds the
    // readers back when that thread lags.
    let (records, received) = mpsc::channel(4 * BATCH);
    std::thread::spawn(move || apply(received, &decoder, &view, &index));
    let sources = async {
        match &sources {
            Some(consumer) => pump(consumer, records.clone()).await,
            None => std::future::pending().await,
        }
    };
    tokio::join!(pump(&control, records.clone()), sources);
}

/// Passes what `consumer` reads on until the receiver is gone.
async fn pump(consumer: &Consumer, records: mpsc::Sender<InboundRecord>) {
    loop {
        match consumer.recv().await {
            Ok(record) => {
                if records.send(record).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "status page: reading the log");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// A consumer of `topics` from their beginning, and those not found.
fn reader<'a>(
    kafka: &KafkaConfig,
    brokers: &str,
    topics: &[&'a str],
) -> anyhow::Result<(Consumer, Vec<&'a str>)> {
    let consumer = Consumer::new(kafka, brokers, READER)?;
    let found = consumer.assign_all_from_start(topics)?;
    let missing = topics
        .iter()
        .filter(|n| !found.iter().any(|f| f == *n))
        .copied()
        .collect();
    Ok((consumer, missing))
}

/// Indexes each batch of records, then applies it to the view: a command
/// the page shows can be explained. Ends when the reader is dropped.
fn apply(
    mut received: mpsc::Receiver<InboundRecord>,
    decoder: &Decoder,
    view: &Mutex<StatusView>,
    index: &ExplainIndex,
) {
    let sources = decoder.source_topics();
    let rounds = decoder.names().rounds.clone();
    let round_codec = unicron_codec::AvroCodec::<unicron_core::DetectorRound>::default();
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = received.blocking_recv() {
        batch.push(first);
        while batch.len() < BATCH {
            match received.try_recv() {
                Ok(record) => batch.push(record),
                Err(_) => break,
            }
        }
        // The detector's records are indexed undecoded: few are ever cited.
        let decoded: Vec<Option<Decoded>> = batch
            .iter()
            .map(|r| {
                if sources.contains(&r.topic.as_str()) {
                    None
                } else {
                    decode(decoder, r)
                }
            })
            .collect();
        let entries: Vec<Indexed<'_>> = batch
            .iter()
            .zip(&decoded)
            .filter(|(r, d)| d.is_some() || sources.contains(&r.topic.as_str()))
            .map(|(r, d)| Indexed {
                topic: &r.topic,
                partition: r.partition,
                offset: r.offset,
                payload: &r.payload,
                record: d.as_ref(),
            })
            .collect();
        if let Err(e) = index.add(&entries) {
            tracing::warn!(error = %e, "status page: indexing the log");
        }
        drop(entries);
        let mut view = view.lock().unwrap_or_else(|e| e.into_inner());
        for (record, decoded) in batch.drain(..).zip(decoded) {
            if record.topic == rounds {
                if let Ok(round) = round_codec.decode(&record.payload) {
                    view.apply_round(&round);
                }
                continue;
            }
            if let Some(read) = decoded.and_then(|d| read(record, d)) {
                view.apply(read);
            }
        }
    }
}

fn decode(decoder: &Decoder, record: &InboundRecord) -> Option<Decoded> {
    match decoder.decode(&record.topic, &record.payload)? {
        Ok(decoded) => Some(decoded),
        Err(e) => {
            tracing::debug!(topic = record.topic, offset = record.offset, error = %e, "status page: skipped");
            None
        }
    }
}

/// What the view takes: planner inputs, decisions and commands.
fn read(record: InboundRecord, decoded: Decoded) -> Option<Read> {
    let record_value = match decoded {
        Decoded::Input(event) => Record::Input(event),
        Decoded::Decision(d) => Record::Decision(d),
        Decoded::Command(c) => Record::Command(c),
        Decoded::Telemetry(_) | Decoded::Log(_) | Decoded::Agent(_) => return None,
    };
    Some(Read {
        topic: record.topic,
        partition: record.partition,
        offset: record.offset,
        record: record_value,
    })
}
