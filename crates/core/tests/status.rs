//! The status page's model: the planner's node and job state re-derived
//! from the log whatever order the topics are read in, and a timeline of
//! every failure, decision, command and result.

mod common;

use common::*;
use unicron_core::planner::{Health, Input, Output, Planner, PolicyName};
use unicron_core::status::{EntryKind, Read, Record, StatusView};
use unicron_core::*;

/// The records a live run leaves on the topics, in the order they were
/// written: each planner input followed by its decision and commands.
fn live_log(planner: &mut Planner, inputs: &[Input]) -> Vec<Read> {
    let mut log = Vec::new();
    let mut offsets = std::collections::BTreeMap::new();
    let mut at = |topic: &str| {
        let offset = offsets.entry(topic.to_string()).or_insert(0i64);
        *offset += 1;
        (topic.to_string(), 0, *offset)
    };
    for input in inputs {
        log.push(Read {
            topic: input.topic.clone(),
            partition: input.partition,
            offset: input.offset,
            record: status_record(input),
        });
        for output in planner.apply(input) {
            let (topic, partition, offset, record) = match output {
                Output::Decision(d) => {
                    let (t, p, o) = at("unicron.decisions");
                    (t, p, o, Record::Decision(d))
                }
                Output::Command(c) => {
                    let (t, p, o) = at("unicron.commands");
                    (t, p, o, Record::Command(c))
                }
                Output::Rejected(_) => continue,
            };
            log.push(Read {
                topic,
                partition,
                offset,
                record,
            });
        }
    }
    log
}

fn status_record(input: &Input) -> Record {
    Record::Input(input.event.clone())
}

fn first_command(log: &[Read], action: CommandAction) -> Command {
    log.iter()
        .find_map(|r| match &r.record {
            Record::Command(c) if c.action == action => Some(c.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {action:?} command in the log"))
}

/// Six nodes, two jobs, an ECC error on n1 (SEV1: isolate and re-plan).
fn scenario() -> (Planner, Vec<Read>) {
    let mut live = planner(PolicyName::Unicron);
    let mut feed = Feed::new();
    let mut inputs: Vec<Input> = (1..=6)
        .map(|n| feed.node_joined("a", &format!("n{n}")))
        .collect();
    inputs.push(feed.job("a", "big", 16, 32, 4, &[(16, 2.0e15), (32, 4.0e15)]));
    inputs.push(feed.job("a", "small", 8, 16, 1, &[(8, 1.0e15), (16, 1.5e15)]));
    inputs.push(feed.failure("a", "n1", FailureKind::EccError));
    let mut log = live_log(&mut live, &inputs);
    // The executor isolates n1: its success is the next planner input.
    let isolate = first_command(&log, CommandAction::IsolateNode);
    let result = feed.result(&isolate, CommandStatus::Succeeded);
    log.extend(live_log(&mut live, &[result]));
    (live, log)
}

fn view_of(log: impl IntoIterator<Item = Read>) -> StatusView {
    let mut view = StatusView::new(unicron_core::planner::PlannerConfig::default());
    for read in log {
        view.apply(read);
    }
    view
}

#[test]
fn nodes_and_jobs_are_the_planners_own_state() {
    let (live, log) = scenario();
    let view = view_of(log);
    let clusters = view.clusters();
    assert_eq!(clusters.len(), 1);
    let a = &clusters[0];
    let state = live.cluster("a").unwrap();
    for node in &a.nodes {
        assert_eq!(node.health, state.nodes[&node.id].health, "{}", node.id);
    }
    // The isolation succeeded: n1 is with the operators.
    assert_eq!(a.nodes[0].id, "n1");
    assert_eq!(a.nodes[0].health, Health::Repairing);
    for job in &a.jobs {
        assert_eq!(job.nodes, state.jobs[&job.id].nodes, "{}", job.id);
    }
    assert_eq!(a.diverged, 0);
    assert_eq!(a.skipped, 0);
    assert!(a.ideal_waf > 0.0);
    assert!(a.waf <= a.ideal_waf + 1e-6, "{} > {}", a.waf, a.ideal_waf);
}

#[test]
fn decisions_read_before_their_triggers_wait_for_them() {
    let (_, log) = scenario();
    let in_order = view_of(log.clone()).clusters();
    // All decisions and commands first, then the inputs (a consumer that
    // happened to read the output topics first).
    let (outputs, inputs): (Vec<Read>, Vec<Read>) = log
        .into_iter()
        .partition(|r| !matches!(r.record, Record::Input(_)));
    let shuffled = view_of(outputs.into_iter().chain(inputs)).clusters();
    assert_eq!(shuffled[0].nodes, in_order[0].nodes);
    assert_eq!(shuffled[0].jobs, in_order[0].jobs);
    assert_eq!(shuffled[0].decisions, in_order[0].decisions);
    assert_eq!(shuffled[0].diverged, 0);
}

#[test]
fn a_job_is_recovering_while_its_command_is_in_flight() {
    let (_, log) = scenario();
    let view = view_of(log);
    let a = &view.clusters()[0];
    // The re-plan's reconfigure commands have no result yet.
    for job in &a.jobs {
        assert_eq!(job.status, "recovering", "{job:?}");
        assert_eq!(job.waf, 0.0);
    }
    assert!(a.series.windows(2).all(|w| w[0].time_ms <= w[1].time_ms));
    let last = a.series.last().unwrap();
    assert_eq!(last.effective, 0.0);
    assert!(last.planned > 0.0 && last.ideal >= last.planned);
    assert_eq!(a.failures.len(), 1);
    assert_eq!(a.failures[0].kind, "ecc_error");
}

#[test]
fn the_timeline_has_every_failure_decision_command_and_result_in_order() {
    let (_, log) = scenario();
    let decisions = log
        .iter()
        .filter(|r| matches!(r.record, Record::Decision(_)))
        .count();
    let commands = log
        .iter()
        .filter(|r| matches!(r.record, Record::Command(_)))
        .count();
    let view = view_of(log);
    let entries = view.timeline_after(0, usize::MAX);
    let count = |kind| entries.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count(EntryKind::Failure), 1);
    assert_eq!(count(EntryKind::Decision), decisions);
    assert_eq!(count(EntryKind::Command), commands);
    assert_eq!(count(EntryKind::Result), 1);
    assert!(entries.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(view.last_seq(), entries.last().unwrap().seq);
    // A page that has seen everything gets nothing new.
    assert!(view.timeline_after(view.last_seq(), 10).is_empty());
    // Decisions carry their alternatives for the page to expand; commands
    // are shown without their signature.
    let decision = entries
        .iter()
        .find(|e| e.kind == EntryKind::Decision && e.summary.contains("isolate"))
        .unwrap();
    assert!(decision.detail["alternatives"].as_array().unwrap().len() >= 2);
    let command = entries
        .iter()
        .find(|e| e.kind == EntryKind::Command)
        .unwrap();
    assert_eq!(command.detail["signature"], serde_json::json!([]));
}

#[test]
fn a_trigger_that_never_comes_is_skipped_and_counted() {
    let (_, log) = scenario();
    // The failure fell out of retention before the page started.
    let log: Vec<Read> = log
        .into_iter()
        .filter(|r| !matches!(&r.record, Record::Input(planner::InputEvent::Failure(_))))
        .collect();
    let mut view = view_of(log);
    assert_eq!(view.clusters()[0].skipped, 0, "waits at first");
    let filler = Decision {
        id: "d:filler".into(),
        cluster: "a".into(),
        time_ms: 0,
        trigger: Trigger {
            kind: "cluster_event".into(),
            ref_id: String::new(),
            topic: "unicron.cluster".into(),
            partition: 9,
            offset: 0,
        },
        inputs_digest: String::new(),
        policy: "unicron".into(),
        policy_version: "2".into(),
        alternatives: vec![],
        chosen_index: None,
        assignment: Default::default(),
        reason: String::new(),
        command_ids: vec![],
    };
    for i in 0..unicron_core::status::MAX_WAITING {
        view.apply(Read {
            topic: "unicron.decisions".into(),
            partition: 0,
            offset: 1000 + i as i64,
            record: Record::Decision(filler.clone()),
        });
    }
    assert_eq!(view.clusters()[0].skipped, 1);
}
