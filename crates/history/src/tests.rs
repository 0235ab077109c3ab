//! Replay, explain and the explain index on a history recorded in memory by
//! the simulator's offline loop (the planner and detector of core, no broker).

use std::collections::BTreeMap;

use unicron_codec::{AvroCodec, KafkaConfig};
use unicron_core::detector::{DetectorConfig, LogRules};
use unicron_core::planner::{InputEvent, PlannerConfig, PolicyName};
use unicron_simulator::offline::{Logged, Offline};
use unicron_simulator::{Sim, SimConfig};

use crate::replay::{Options, Setup, replay};
use crate::{Decoded, Decoder, ExplainIndex, History, Indexed, Recorded, TopicNames};

/// The offline loop names topics without a prefix.
fn names() -> TopicNames {
    TopicNames::new(&KafkaConfig {
        topic_prefix: String::new(),
        ..KafkaConfig::default()
    })
}

type Raw = Vec<(String, i32, i64, Vec<u8>)>;

/// One simulated hour with frequent failures, recorded once for all tests.
fn recorded() -> (History, Raw) {
    static RECORDED: std::sync::OnceLock<(History, Raw)> = std::sync::OnceLock::new();
    RECORDED.get_or_init(record).clone()
}

/// Each record at its offline (topic, partition 0, offset), as the
/// services would have logged it.
fn record() -> (History, Raw) {
    let config = SimConfig {
        seed: 5,
        mtbf_s: Some(600.0),
        ..SimConfig::default()
    };
    let mut run = Offline::new(
        Sim::new(config, None),
        DetectorConfig::default(),
        PlannerConfig::default(),
    )
    .recording();
    run.run_for(3_600.0);
    let log = run.log.take().expect("recording");
    let mut history = History {
        names: names(),
        ..History::default()
    };
    let mut raw = Vec::new();
    let mut offsets: BTreeMap<&str, i64> = BTreeMap::new();
    for entry in log {
        let topic = entry.topic();
        let offset = {
            let next = offsets.entry(topic).or_default();
            *next += 1;
            *next - 1
        };
        fn at<T>(topic: &str, offset: i64, record: T) -> Recorded<T> {
            Recorded {
                topic: topic.to_string(),
                partition: 0,
                offset,
                record,
            }
        }
        let payload = match entry {
            Logged::Telemetry(r) => encode(&r, |r| history.telemetry.push(at(topic, offset, r))),
            Logged::Log(r) => encode(&r, |r| history.logs.push(at(topic, offset, r))),
            Logged::Agent(r) => encode(&r, |r| history.agent.push(at(topic, offset, r))),
            Logged::Cluster(r) => encode(&r, |r| history.cluster.push(at(topic, offset, r))),
            Logged::Failure(r) => encode(&r, |r| history.failures.push(at(topic, offset, r))),
            Logged::Decision(r) => encode(&r, |r| history.decisions.push(at(topic, offset, r))),
            Logged::Command(r) => encode(&r, |r| history.commands.push(at(topic, offset, r))),
            Logged::Result(r) => encode(&r, |r| history.results.push(at(topic, offset, r))),
        };
        raw.push((topic.to_string(), 0, offset, payload));
    }
    (history, raw)
}

fn encode<T: unicron_codec::schemas::AvroRecord + Clone>(
    record: &T,
    keep: impl FnOnce(T),
) -> Vec<u8> {
    keep(record.clone());
    AvroCodec::<T>::default().encode(record).expect("encodes")
}

/// What the recorded run decided with: the offline loop, unless told
/// otherwise, lets every node of the cluster be isolated.
fn setup(policy: PolicyName) -> Setup {
    Setup {
        planner: PlannerConfig {
            policy,
            max_isolations_per_hour: Some(SimConfig::default().nodes),
            ..PlannerConfig::default()
        },
        detector: DetectorConfig::default(),
        rules: LogRules::builtin(),
    }
}

#[test]
fn recorded_run_replays_identically_and_what_if_differs_by_policy() {
    let (history, _) = recorded();
    assert!(!history.decisions.is_empty() && !history.failures.is_empty());
    let report = replay(
        setup(PolicyName::Unicron),
        &Options::default(),
        &history,
        None,
        &|_| {},
    );
    assert_eq!(
        report.diverged, 0,
        "{:#?}",
        report.decisions.first_divergence
    );
    assert_eq!(report.decisions.compared, history.decisions.len() as u64);
    assert!(report.failures.compared > 0);
    assert_eq!(report.records_replayed, history.len());
    assert!(report.what_if.is_none());

    // A window after the run compares nothing.
    let later = Options {
        since: Some(i64::MAX),
        ..Options::default()
    };
    let report = replay(setup(PolicyName::Unicron), &later, &history, None, &|_| {});
    assert_eq!(
        (report.decisions.compared, report.failures.compared),
        (0, 0)
    );

    let other = Options {
        policy: Some(PolicyName::CheckpointRestart),
        ..Options::default()
    };
    let phases = std::cell::RefCell::new(Vec::new());
    let report = replay(
        setup(PolicyName::Unicron),
        &other,
        &history,
        Some(setup(PolicyName::Unicron)),
        &|p| phases.borrow_mut().push(p.to_string()),
    );
    let what_if = report.what_if.expect("a what-if");
    assert_eq!(what_if.policy, "checkpoint-restart");
    assert_eq!((what_if.failures_added, what_if.failures_removed), (0, 0));
    assert!(what_if.waf_recorded > 0.0);
    assert_eq!(phases.borrow().last().map(String::as_str), Some("what-if"));
}

/// Adds `raw` to `index` as the status page does: in batches, the
/// detector's topics undecoded.
fn fill(index: &ExplainIndex, raw: &Raw) {
    let decoder = Decoder::with_names(names());
    let sources = decoder.source_topics();
    let decoded: Vec<Option<Decoded>> = raw
        .iter()
        .map(|(topic, _, _, payload)| {
            let source = sources.contains(&topic.as_str());
            (!source).then(|| decoder.decode(topic, payload).unwrap().unwrap())
        })
        .collect();
    let entries: Vec<Indexed<'_>> = raw
        .iter()
        .zip(&decoded)
        .map(|((topic, partition, offset, payload), record)| Indexed {
            topic,
            partition: *partition,
            offset: *offset,
            payload,
            record: record.as_ref(),
        })
        .collect();
    for batch in entries.chunks(97) {
        index.add(batch).unwrap();
    }
}

#[test]
fn recorded_run_explains_from_the_index_as_from_the_history() {
    let (mut history, mut raw) = recorded();
    // A command read twice (a producer retry), the later copy different:
    // the first in (partition, offset) order counts, whichever is read first.
    let first = history.commands[0].clone();
    let mut again = first.clone();
    again.offset = history.commands.last().unwrap().offset + 1;
    again.record.nodes.push("elsewhere".into());
    let payload = AvroCodec::default().encode(&again.record).unwrap();
    history.commands.push(again.clone());
    raw.push((again.topic.clone(), 0, again.offset, payload));
    // Consumers read partitions and topics interleaved: results and
    // commands may come before their decisions, the later copy first.
    raw.reverse();

    // A record that does not decode: the history skips it, the index keeps
    // it undecoded and finds nothing there.
    raw.push(("telemetry".into(), 1, 0, b"not avro".to_vec()));

    let dir = tempfile::tempdir().unwrap();
    let index = ExplainIndex::open(&dir.path().join("index"), names()).unwrap();
    fill(&index, &raw);
    assert!(index.chain("no such command").unwrap().is_none());
    let mut with_sources = 0;
    let mut with_results = 0;
    for command in &history.commands {
        let id = &command.record.id;
        let from_history = crate::explain::chain(&history, id).expect("in the history");
        let from_index = index.chain(id).unwrap().expect("in the index");
        assert_eq!(from_index, from_history, "{id}");
        with_sources += from_index.sources.iter().any(|s| s.record.is_some()) as u32;
        with_results += !from_index.results.is_empty() as u32;
    }
    assert!(with_sources > 0 && with_results > 0);
    let explained = index.chain(&first.record.id).unwrap().unwrap();
    assert_eq!(explained.command, first.record);
}

#[test]
fn an_index_opens_empty_and_leaves_other_directories_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let (history, raw) = recorded();
    fill(&ExplainIndex::open(&path, names()).unwrap(), &raw);
    let id = &history.commands[0].record.id;
    let reopened = ExplainIndex::open(&path, names()).unwrap();
    assert!(reopened.chain(id).unwrap().is_none(), "emptied at open");
    let busy = ExplainIndex::open(&path, names()).unwrap_err();
    assert!(busy.to_string().contains("another process"), "{busy}");
    drop(reopened);

    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("keep"), "").unwrap();
    let refused = ExplainIndex::open(&other, names()).unwrap_err();
    assert!(refused.to_string().contains("other files"), "{refused}");
    assert!(other.join("keep").is_file());
}

#[test]
fn the_decoder_maps_topics_to_planner_inputs_and_skips_others() {
    let (history, _) = recorded();
    let decoder = Decoder::with_names(names());
    let failure = &history.failures[0].record;
    let payload = AvroCodec::default().encode(failure).unwrap();
    assert_eq!(
        decoder.decode("failures", &payload).unwrap().unwrap(),
        Decoded::Input(InputEvent::Failure(failure.clone()))
    );
    assert!(decoder.decode("unicron.failures", &payload).is_none());
    assert!(decoder.decode("decisions", &payload).unwrap().is_err());
    let inputs = history.planner_inputs();
    let key = ("failures".to_string(), 0, history.failures[0].offset);
    assert_eq!(inputs[&key].event, InputEvent::Failure(failure.clone()));
}
