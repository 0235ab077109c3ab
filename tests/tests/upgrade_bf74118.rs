//! Upgrading from commit bf74118: its archive, planner state dir and
//! executor dedupe table (`tests/fixtures/upgrade-bf74118`, made as its
//! README says) must be read by the current code as that version meant them.
//! Otherwise an upgrade re-executes commands or replays to other decisions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use unicron_codec::AvroCodec;
use unicron_codec::archive::{self, Archived};
use unicron_codec::schemas::AvroRecord;
use unicron_core::planner::{ClusterState, Input, InputEvent, Output, Planner, PlannerConfig};
use unicron_core::replay::{RecordedStep, steps};
use unicron_core::signing::CommandSigner;
use unicron_core::{ClusterEvent, Command, CommandResult, CommandStatus, Decision, FailureEvent};
use unicron_store::{Store, StoreOptions};

// The executor keeps its dedupe encoding private; compiling its source here
// tests the decoding the executor itself runs.
#[allow(dead_code)]
#[path = "../../crates/commands/src/dedupe.rs"]
mod dedupe;

/// What the old run recorded: one cluster, `sim`.
const CLUSTER: &str = "sim";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/upgrade-bf74118")
}

/// A copy of a fixture directory: opening RocksDB writes to it.
fn copy_of(name: &str) -> (tempfile::TempDir, PathBuf) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    copy(&fixture().join(name), &dir);
    (tmp, dir)
}

fn read<T: AvroRecord>(topic: &str) -> Vec<Archived<T>> {
    let records = archive::read_topic::<T>(fixture().join("archive"), topic)
        .unwrap_or_else(|e| panic!("reading {topic} from the old archive: {e}"));
    assert!(!records.is_empty(), "{topic}: nothing archived");
    records
}

fn encode<T: AvroRecord>(record: &T) -> Vec<u8> {
    AvroCodec::<T>::default().encode(record).expect("encodes")
}

/// The planner's recorded inputs by (topic, partition, offset), as replay
/// looks triggers up.
fn planner_inputs() -> BTreeMap<(String, i32, i64), Input> {
    let mut inputs = BTreeMap::new();
    let mut put = |topic: String, partition: i32, offset: i64, event: InputEvent| {
        inputs.insert(
            (topic.clone(), partition, offset),
            Input {
                topic,
                partition,
                offset,
                event,
            },
        );
    };
    for r in read::<FailureEvent>("unicron.failures") {
        put(
            r.topic,
            r.partition,
            r.offset,
            InputEvent::Failure(r.record),
        );
    }
    for r in read::<ClusterEvent>("unicron.cluster") {
        put(
            r.topic,
            r.partition,
            r.offset,
            InputEvent::Cluster(r.record),
        );
    }
    for r in read::<CommandResult>("unicron.command-results") {
        put(r.topic, r.partition, r.offset, InputEvent::Result(r.record));
    }
    inputs
}

fn recorded_steps(inputs: &BTreeMap<(String, i32, i64), Input>) -> Vec<RecordedStep> {
    let decisions = read::<Decision>("unicron.decisions");
    let commands = read::<Command>("unicron.commands");
    steps(
        decisions.iter().map(|d| &d.record),
        inputs,
        commands.iter().map(|c| &c.record),
        None,
    )
}

fn unsigned(command: &Command) -> Command {
    // The old run signed with a key generated for it; replay has none.
    Command {
        key_id: String::new(),
        signature: Vec::new(),
        ..command.clone()
    }
}

/// The planner's settings of that run: the defaults, but for the hourly
/// isolation limit, which did not exist (16 simulated nodes would allow one).
fn bf74118_planner() -> PlannerConfig {
    PlannerConfig {
        max_isolations_per_hour: Some(1000),
        ..PlannerConfig::default()
    }
}

/// A fresh current planner with the recorded steps applied, checking each
/// decision and command against the recorded one byte for byte (Avro).
fn replay(steps: &[RecordedStep]) -> Planner {
    let mut planner = Planner::new(
        bf74118_planner(),
        CommandSigner::from_seed("replay", [0; 32]),
    );
    for step in steps {
        let input = step
            .input
            .as_ref()
            .unwrap_or_else(|| panic!("decision {}: trigger not archived", step.decision.id));
        let mut decision = None;
        let mut commands = Vec::new();
        for output in planner.apply(input) {
            match output {
                Output::Decision(d) => decision = Some(d),
                Output::Command(c) => commands.push(c),
                Output::Rejected(r) => panic!("decision {}: rejected {r:?}", step.decision.id),
            }
        }
        let decision = decision
            .unwrap_or_else(|| panic!("decision {}: no decision replayed", step.decision.id));
        // The version names the decision logic; later versions changed only
        // what agent-launched jobs are told (this run has none), so every
        // byte but the version must match.
        let decision = unicron_core::Decision {
            policy_version: step.decision.policy_version.clone(),
            ..decision
        };
        assert!(
            encode(&decision) == encode(&step.decision),
            "decision {} diverged:\nrecorded {:#?}\nreplayed {:#?}",
            step.decision.id,
            step.decision,
            decision
        );
        let want: Vec<Vec<u8>> = step.commands.iter().map(|c| encode(&unsigned(c))).collect();
        let got: Vec<Vec<u8>> = commands.iter().map(|c| encode(&unsigned(c))).collect();
        assert!(
            want == got,
            "decision {}: commands diverged:\nrecorded {:#?}\nreplayed {:#?}",
            step.decision.id,
            step.commands,
            commands
        );
    }
    planner
}

#[test]
fn old_archive_replays_to_byte_identical_decisions_and_commands() {
    let inputs = planner_inputs();
    let steps = recorded_steps(&inputs);
    // The numbers of the recorded run (README): a divergence from them means
    // the archive was read differently, not only decided differently.
    assert_eq!(steps.len(), 44, "decisions recorded");
    let commands: usize = steps.iter().map(|s| s.commands.len()).sum();
    assert_eq!(commands, 10, "commands recorded");
    replay(&steps);
}

/// `old` has every field of `new` with the same value: nothing the old
/// version stored is dropped by the current type.
fn kept(old: &serde_json::Value, new: &serde_json::Value, path: &str) {
    match (old, new) {
        (serde_json::Value::Object(o), serde_json::Value::Object(n)) => {
            for (k, v) in o {
                let at = format!("{path}.{k}");
                let Some(nv) = n.get(k) else {
                    panic!("{at}: stored by the old planner, dropped by the current ClusterState");
                };
                kept(v, nv, &at);
            }
        }
        (serde_json::Value::Array(o), serde_json::Value::Array(n)) => {
            assert_eq!(o.len(), n.len(), "{path}: length");
            for (i, (a, b)) in o.iter().zip(n).enumerate() {
                kept(a, b, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(old, new, "{path}"),
    }
}

#[test]
fn old_planner_state_dir_opens_and_resumes_where_it_stopped() {
    let (_tmp, dir) = copy_of("planner");
    let store = Store::open(&dir, StoreOptions::default()).expect("old planner state dir opens");

    // The planner stores each cluster as JSON under `cluster/<id>` and
    // restores it with serde_json, as here.
    let stored = store.state_with_prefix(b"cluster/").unwrap();
    assert_eq!(stored.len(), 1, "one cluster stored");
    let mut restored = Planner::new(
        bf74118_planner(),
        CommandSigner::from_seed("replay", [0; 32]),
    );
    for (key, bytes) in &stored {
        let key = String::from_utf8_lossy(key);
        let state: ClusterState = serde_json::from_slice(bytes)
            .unwrap_or_else(|e| panic!("{key}: old state does not deserialize: {e}"));
        assert_eq!(format!("cluster/{}", state.id), key);
        let old: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        kept(&old, &serde_json::to_value(&state).unwrap(), &key);
        restored
            .restore(state)
            .unwrap_or_else(|e| panic!("{key}: old state is refused: {e}"));
    }

    // It is the state the recorded decisions build in the current planner:
    // resuming on it continues the old run's decisions.
    let inputs = planner_inputs();
    let replayed = replay(&recorded_steps(&inputs));
    let restored_state = restored.cluster(CLUSTER).expect("sim restored");
    assert!(!restored_state.jobs.is_empty() && !restored_state.nodes.is_empty());
    assert_eq!(Some(restored_state), replayed.cluster(CLUSTER));

    // Offsets: every input partition resumes after its last archived record,
    // so nothing is applied twice or skipped.
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (topic, partition, offset) in inputs.keys() {
        let n = next.entry((topic.clone(), *partition)).or_default();
        *n = (*n).max(offset + 1);
    }
    for ((topic, partition), want) in &next {
        assert_eq!(
            store.offset(topic, *partition).unwrap(),
            Some(*want),
            "stored offset of {topic}/{partition}"
        );
    }
    // Nothing is stored to be published: the run stopped cleanly.
    assert!(store.outbox().unwrap().is_empty());
}

#[test]
fn old_executor_dedupe_table_keeps_every_published_result_finished() {
    let (_tmp, dir) = copy_of("executor");
    let store = Store::open(&dir, StoreOptions::default()).expect("old executor state dir opens");

    let results = read::<CommandResult>("unicron.command-results");
    let finished: Vec<&CommandResult> = results
        .iter()
        .map(|r| &r.record)
        .filter(|r| r.status != CommandStatus::Accepted)
        .collect();
    assert_eq!(finished.len(), 10, "results published by the old executor");
    for result in &finished {
        let bytes = store
            .remembered(&dedupe::key(&result.command_id))
            .unwrap()
            .unwrap_or_else(|| panic!("{}: not in the dedupe table", result.command_id));
        assert_eq!(
            dedupe::Marker::decode(&bytes),
            dedupe::Marker::Finished(result.status),
            "{}: would not be recognised as done",
            result.command_id
        );
    }
    // Every command of the cluster the old planner issued was acted on.
    let commands = read::<Command>("unicron.commands");
    for c in commands.iter().filter(|c| c.record.cluster == CLUSTER) {
        assert!(
            finished.iter().any(|r| r.command_id == c.record.id),
            "{}: issued but no result",
            c.record.id
        );
    }
    // The executor resumes after the last command it read.
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for c in &commands {
        let n = next.entry(c.partition).or_default();
        *n = (*n).max(c.offset + 1);
    }
    for (partition, want) in next {
        assert_eq!(
            store.offset("unicron.commands", partition).unwrap(),
            Some(want),
            "stored offset of unicron.commands/{partition}"
        );
    }
    assert!(store.outbox().unwrap().is_empty());
}
