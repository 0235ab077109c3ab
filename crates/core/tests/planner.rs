//! The planner as a pure state machine: actions by severity, escalation,
//! re-planning, baselines, determinism and cluster isolation.

use std::collections::BTreeSet;

use unicron_core::planner::{
    Input, InputEvent, JobStatus, Output, Planner, PlannerConfig, PolicyName,
};
use unicron_core::signing::CommandSigner;
use unicron_core::*;

mod common;

use common::*;

/// Six 8-GPU nodes, two jobs: `big` (16-32 GPUs, 4 replicas) and `small`
/// (8-16 GPUs). The DP gives big 32 (n1-n4) and small 16 (n5, n6).
fn two_jobs(planner: &mut Planner, feed: &mut Feed, cluster: &str) -> Vec<Output> {
    let mut last = Vec::new();
    for n in 1..=6 {
        planner.apply(&feed.node_joined(cluster, &format!("n{n}")));
    }
    planner.apply(&feed.job(cluster, "big", 16, 32, 4, &[(16, 2.0e15), (32, 4.0e15)]));
    last.extend(planner.apply(&feed.job(cluster, "small", 8, 16, 1, &[(8, 1.0e15), (16, 1.5e15)])));
    last
}

fn nodes_of(planner: &Planner, cluster: &str, job: &str) -> Vec<String> {
    planner.cluster(cluster).unwrap().jobs[job].nodes.clone()
}

#[test]
fn jobs_are_placed_by_the_dp() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    assert_eq!(nodes_of(&p, "a", "big"), ["n1", "n2", "n3", "n4"]);
    assert_eq!(nodes_of(&p, "a", "small"), ["n5", "n6"]);
}

#[test]
fn sev3_reattempts_in_place() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let out = p.apply(&feed.failure("a", "n2", FailureKind::NcclTimeout));
    let cmds = commands(&out);
    assert_eq!(cmds.len(), 1);
    assert_eq!(cmds[0].action, CommandAction::Reattempt);
    assert_eq!(cmds[0].job.as_deref(), Some("big"));
    assert_eq!(decision(&out).command_ids, vec![cmds[0].id.clone()]);
    assert!(cmds[0].causation.iter().any(|c| c.starts_with("f-")));
}

#[test]
fn sev2_restarts_from_a_replica_when_there_is_one() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let cmds = commands(&p.apply(&feed.failure("a", "n2", FailureKind::CudaError)));
    assert_eq!(cmds.len(), 1);
    assert_eq!(cmds[0].action, CommandAction::Restart);
    assert_eq!(cmds[0].restore_from.as_deref(), Some("replica:n1"));
    // small has no data-parallel replica: checkpoint.
    let cmds = commands(&p.apply(&feed.failure("a", "n5", FailureKind::OutOfMemory)));
    assert_eq!(cmds[0].restore_from.as_deref(), Some("checkpoint"));
}

#[test]
fn sev1_isolates_and_replans_the_cluster() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let out = p.apply(&feed.failure("a", "n1", FailureKind::EccError));
    let cmds = commands(&out);
    let actions: Vec<_> = cmds
        .iter()
        .map(|c| (c.action, c.job.clone(), c.nodes.clone()))
        .collect();
    assert_eq!(
        actions[0],
        (CommandAction::IsolateNode, None, vec!["n1".to_string()])
    );
    // big (worth more per GPU) keeps 32 GPUs by taking n6 from small.
    assert!(actions.contains(&(
        CommandAction::Reconfigure,
        Some("big".into()),
        vec!["n2".into(), "n3".into(), "n4".into(), "n6".into()]
    )));
    assert!(actions.contains(&(
        CommandAction::Reconfigure,
        Some("small".into()),
        vec!["n5".into()]
    )));
    let d = decision(&out);
    assert_eq!(d.chosen_index, Some(0));
    assert!(d.alternatives.len() >= 2, "{:?}", d.alternatives);
    assert!(d.alternatives[0].objective >= d.alternatives[1].objective);
    assert_eq!(d.alternatives[0].allocation["big"], 32);
    assert!(d.reason.contains("isolate n1"), "{}", d.reason);
    let state = p.cluster("a").unwrap();
    assert_eq!(
        state.nodes["n1"].health,
        unicron_core::planner::Health::Isolated
    );
}

#[test]
fn failed_reattempt_escalates_to_restart() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let reattempt =
        commands(&p.apply(&feed.failure("a", "n3", FailureKind::ConnectionReset)))[0].clone();
    let out = p.apply(&feed.result(&reattempt, CommandStatus::Failed));
    let cmds = commands(&out);
    assert_eq!(cmds.len(), 1);
    assert_eq!(cmds[0].action, CommandAction::Restart);
    assert!(
        decision(&out).reason.contains("escalate to SEV2"),
        "{}",
        decision(&out).reason
    );
    // ...and a failed restart isolates the node.
    let out = p.apply(&feed.result(&cmds[0], CommandStatus::Failed));
    assert_eq!(commands(&out)[0].action, CommandAction::IsolateNode);
    assert_eq!(commands(&out)[0].nodes, vec!["n3".to_string()]);
}

#[test]
fn repeated_fault_within_the_window_escalates() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let first = commands(&p.apply(&feed.failure("a", "n2", FailureKind::LinkFlapping)));
    assert_eq!(first[0].action, CommandAction::Reattempt);
    let second = commands(&p.apply(&feed.failure("a", "n2", FailureKind::LinkFlapping)));
    assert_eq!(second[0].action, CommandAction::Restart);
    // Outside the window (5 min by default) it is a first fault again.
    feed.tick(3600);
    let third = commands(&p.apply(&feed.failure("a", "n2", FailureKind::LinkFlapping)));
    assert_eq!(third[0].action, CommandAction::Reattempt);
}

#[test]
fn a_redelivered_failure_id_acts_once() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let input = feed.failure("a", "n2", FailureKind::CudaError);
    assert_eq!(commands(&p.apply(&input))[0].action, CommandAction::Restart);
    // The detector re-publishes after a crash: same id, later offset.
    let again = Input {
        offset: input.offset + 100,
        ..input.clone()
    };
    assert!(p.apply(&again).is_empty());
}

#[test]
fn a_repeat_the_detector_already_escalated_is_not_escalated_again() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    p.apply(&feed.failure("a", "n2", FailureKind::LinkFlapping));
    let mut second = feed.failure("a", "n2", FailureKind::LinkFlapping);
    if let InputEvent::Failure(f) = &mut second.event {
        f.severity = Severity::Sev2; // the detector's node escalation
    }
    let out = p.apply(&second);
    assert_eq!(
        commands(&out)[0].action,
        CommandAction::Restart,
        "SEV2, not SEV1"
    );
}

#[test]
fn no_command_when_nothing_changes() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    // Both jobs are at their maximum: a new node changes nothing.
    let out = p.apply(&feed.node_joined("a", "n7"));
    assert!(commands(&out).is_empty());
    let d = decision(&out);
    assert!(d.command_ids.is_empty());
    assert!(d.reason.contains("keeps every job"), "{}", d.reason);
    // A success result: recorded, no command.
    let cmd = commands(&p.apply(&feed.failure("a", "n2", FailureKind::NcclTimeout)))[0].clone();
    let out = p.apply(&feed.result(&cmd, CommandStatus::Succeeded));
    assert!(commands(&out).is_empty());
    assert!(!p.cluster("a").unwrap().in_flight.contains_key(&cmd.id));
}

#[test]
fn rejections_of_forged_copies_leave_the_real_command_in_flight() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let cmd = commands(&p.apply(&feed.failure("a", "n2", FailureKind::NcclTimeout)))[0].clone();
    for (reason, stays) in [
        ("unsigned: the command carries no signature", true),
        ("forged: signature does not match the command", true),
        ("expired: issued long ago", false),
    ] {
        let mut input = feed.result(&cmd, CommandStatus::Rejected);
        if let InputEvent::Result(r) = &mut input.event {
            r.reason = Some(reason.into());
        }
        p.apply(&input);
        let in_flight = p.cluster("a").unwrap().in_flight.contains_key(&cmd.id);
        assert_eq!(in_flight, stays, "{reason}");
    }
}

#[test]
fn repaired_node_is_given_back() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    p.apply(&feed.failure("a", "n1", FailureKind::GpuDriverError));
    assert_eq!(nodes_of(&p, "a", "small"), ["n5"]);
    feed.tick(600);
    let repaired = feed.node_event("a", "n1", ClusterEventKind::NodeRepaired, "operator");
    let cmds = commands(&p.apply(&repaired));
    // unicron isolated it, so unicron hands it back to the scheduler first.
    assert_eq!(cmds.len(), 2);
    assert_eq!(cmds[0].action, CommandAction::ReturnNode);
    assert_eq!(cmds[0].nodes, ["n1"]);
    assert_eq!(cmds[1].job.as_deref(), Some("small"));
    assert_eq!(nodes_of(&p, "a", "small"), ["n1", "n5"]);
}

#[test]
fn isolations_stop_at_the_hourly_limit() {
    // Six nodes: 2% is 0.12, so the default allows one isolation an hour.
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let first = commands(&p.apply(&feed.failure("a", "n1", FailureKind::EccError)));
    assert_eq!(first[0].action, CommandAction::IsolateNode);
    let out = p.apply(&feed.failure("a", "n2", FailureKind::EccError));
    assert!(commands(&out).is_empty());
    let reason = decision(&out).reason;
    assert!(
        reason.contains("1 nodes isolated within the last hour, the limit is 1")
            && reason.contains("needs an operator"),
        "{reason}"
    );
    let state = p.cluster("a").unwrap();
    assert!(state.nodes["n2"].health.schedulable());
    assert!(state.jobs["big"].nodes.contains(&"n2".to_string()));
    // An hour later the window has moved on.
    feed.tick(3_600);
    let later = commands(&p.apply(&feed.failure("a", "n3", FailureKind::EccError)));
    assert_eq!(later[0].action, CommandAction::IsolateNode);
    assert_eq!(later[0].nodes, ["n3"]);

    // A configured limit replaces the 2%.
    let config = PlannerConfig {
        max_isolations_per_hour: Some(2),
        ..PlannerConfig::default()
    };
    let mut p = Planner::new(config, CommandSigner::from_seed("test", [1; 32]));
    let mut feed = Feed::new();
    two_jobs(&mut p, &mut feed, "a");
    for (node, isolated) in [("n1", true), ("n2", true), ("n3", false)] {
        let cmds = commands(&p.apply(&feed.failure("a", node, FailureKind::EccError)));
        assert_eq!(
            cmds.first().map(|c| c.action) == Some(CommandAction::IsolateNode),
            isolated,
            "{node}"
        );
    }
}

#[test]
fn a_schedulers_verdict_takes_nodes_out_without_a_command() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    // Slurm says n6 is down: small loses it, nothing is isolated.
    let out = p.apply(&feed.node_event("a", "n6", ClusterEventKind::NodeDown, "Not responding"));
    let cmds = commands(&out);
    assert!(
        cmds.iter().all(|c| c.action != CommandAction::IsolateNode),
        "{cmds:?}"
    );
    assert!(!nodes_of(&p, "a", "small").contains(&"n6".to_string()));
    assert!(!nodes_of(&p, "a", "big").contains(&"n6".to_string()));
    assert!(decision(&out).reason.contains("n6 down (Not responding)"));
    // Said again (a poller restarted): no second action.
    let again = p.apply(&feed.node_event("a", "n6", ClusterEventKind::NodeDown, "Not responding"));
    assert!(commands(&again).is_empty());
    assert!(decision(&again).reason.contains("already out of service"));
    // A node unicron isolated first and Slurm marks down later: no action.
    commands(&p.apply(&feed.failure("a", "n1", FailureKind::EccError)));
    let late = p.apply(&feed.node_event("a", "n1", ClusterEventKind::NodeDown, "Not responding"));
    assert!(commands(&late).is_empty());
    // An operator's drain takes a node out the same way.
    let drained = p.apply(&feed.node_event("a", "n5", ClusterEventKind::NodeDrained, "bad fan"));
    assert!(!nodes_of(&p, "a", "small").contains(&"n5".to_string()));
    assert!(
        commands(&drained)
            .iter()
            .all(|c| c.action != CommandAction::IsolateNode)
    );
    // Back in service: no return_node for a node unicron never drained.
    let back = p.apply(&feed.node_event("a", "n6", ClusterEventKind::NodeRepaired, "idle"));
    let cmds = commands(&back);
    assert!(
        cmds.iter().all(|c| c.action != CommandAction::ReturnNode),
        "{cmds:?}"
    );
    assert!(p.cluster("a").unwrap().nodes["n6"].health.schedulable());
    // The end of a Slurm job unicron does not plan: no decision at all.
    let mut other = ClusterEvent::new("a", feed.tick(1), ClusterEventKind::JobFinished);
    other.job_id = Some("someone-elses".into());
    let input = feed.input("unicron.cluster", InputEvent::Cluster(other));
    assert!(p.apply(&input).is_empty());
}

#[test]
fn impossible_records_are_rejected_and_change_nothing() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let before = p.cluster("a").unwrap().clone();
    let mut bad = feed.node_joined("a", "x");
    if let InputEvent::Cluster(c) = &mut bad.event {
        c.node = None;
    }
    assert_eq!(
        p.apply(&bad),
        vec![Output::Rejected("NodeJoined without node".into())]
    );
    let mut bad_job = feed.job("a", "weird", 8, 16, 1, &[(16, 1.0), (8, 2.0)]);
    let out = p.apply(&bad_job);
    assert!(
        matches!(&out[0], Output::Rejected(r) if r.contains("job.throughput[1]")),
        "{out:?}"
    );
    if let InputEvent::Cluster(c) = &mut bad_job.event {
        c.job = None;
    }
    assert!(matches!(&p.apply(&bad_job)[0], Output::Rejected(_)));
    assert_eq!(p.cluster("a").unwrap(), &before);
}

#[test]
fn checkpoint_restart_baseline_restarts_and_waits_for_capacity() {
    let (mut p, mut feed) = (planner(PolicyName::CheckpointRestart), Feed::new());
    for n in 1..=4 {
        p.apply(&feed.node_joined("a", &format!("n{n}")));
    }
    p.apply(&feed.job("a", "big", 16, 32, 4, &[(16, 2.0e15), (32, 4.0e15)]));
    assert_eq!(nodes_of(&p, "a", "big").len(), 4);
    let cmds = commands(&p.apply(&feed.failure("a", "n2", FailureKind::NcclTimeout)));
    assert_eq!(
        (cmds[0].action, cmds[0].restore_from.as_deref()),
        (CommandAction::Restart, Some("checkpoint"))
    );
    // SEV1 with no spare node: the job waits at its full size.
    let cmds = commands(&p.apply(&feed.failure("a", "n2", FailureKind::EccError)));
    let actions: Vec<_> = cmds.iter().map(|c| c.action).collect();
    assert_eq!(actions, [CommandAction::IsolateNode, CommandAction::Pause]);
    assert_eq!(
        p.cluster("a").unwrap().jobs["big"].status,
        JobStatus::Paused
    );
    let cmds = commands(&p.apply(&feed.node_joined("a", "n5")));
    assert_eq!(cmds[0].action, CommandAction::Resume);
    assert_eq!(cmds[0].nodes.len(), 4);
}

#[test]
fn elastic_baseline_shrinks_only_the_hit_job() {
    let (mut p, mut feed) = (planner(PolicyName::ElasticSingleJob), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let before_small = nodes_of(&p, "a", "small");
    let cmds = commands(&p.apply(&feed.failure("a", "n1", FailureKind::NvlinkError)));
    let actions: Vec<_> = cmds.iter().map(|c| (c.action, c.job.clone())).collect();
    assert_eq!(
        actions,
        [
            (CommandAction::IsolateNode, None),
            (CommandAction::Reconfigure, Some("big".into()))
        ]
    );
    assert_eq!(nodes_of(&p, "a", "big"), ["n2", "n3", "n4"]);
    assert_eq!(nodes_of(&p, "a", "small"), before_small);
    // SEV3: no in-place reattempt in this baseline.
    let cmds = commands(&p.apply(&feed.failure("a", "n5", FailureKind::NcclTimeout)));
    assert_eq!(cmds[0].action, CommandAction::Restart);
}

/// A seeded random event stream over two clusters.
fn random_stream(seed: u64, len: usize) -> Vec<Input> {
    let mut rng = seed;
    let mut next = move |n: u64| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) % n
    };
    let mut feed = Feed::new();
    let mut inputs = Vec::new();
    for cluster in ["a", "b"] {
        for n in 1..=8 {
            inputs.push(feed.node_joined(cluster, &format!("n{n}")));
        }
    }
    let kinds = FailureKind::ALL;
    for _ in 0..len {
        let cluster = if next(2) == 0 { "a" } else { "b" };
        let input = match next(6) {
            0 => feed.job(
                cluster,
                &format!("j{}", next(5)),
                8 * (1 + next(2) as i32),
                8 * (2 + next(4) as i32),
                1 + next(3) as i32,
                &[
                    (8, 1.0e15 * (1 + next(3)) as f64),
                    (32, 3.0e15 * (1 + next(2)) as f64),
                ],
            ),
            1 => {
                let time_ms = feed.tick(30);
                feed.input(
                    "unicron.cluster",
                    InputEvent::Cluster(ClusterEvent {
                        cluster: cluster.into(),
                        time_ms,
                        kind: if next(2) == 0 {
                            ClusterEventKind::NodeRepaired
                        } else {
                            ClusterEventKind::JobFinished
                        },
                        node: Some(format!("n{}", 1 + next(8))),
                        gpus: None,
                        job_id: Some(format!("j{}", next(5))),
                        job: None,
                        address: None,
                        launch: None,
                        snapshot_address: None,
                        snapshots: Vec::new(),
                        restored: None,
                        check: None,
                        reason: None,
                    }),
                )
            }
            _ => feed.failure(
                cluster,
                &format!("n{}", 1 + next(8)),
                kinds[next(kinds.len() as u64) as usize],
            ),
        };
        inputs.push(input);
    }
    inputs
}

fn check_invariants(p: &Planner) {
    for state in p.clusters() {
        let mut used = BTreeSet::new();
        for (id, job) in &state.jobs {
            for node in &job.nodes {
                assert!(used.insert(node.clone()), "{node} in two jobs");
                assert!(
                    state.nodes[node].health.schedulable(),
                    "{id} on unschedulable {node}"
                );
            }
            let gpus = state.gpus_of(&job.nodes);
            if job.status == JobStatus::Running {
                assert!(gpus as i32 >= job.spec.min_gpus, "{id} below its minimum");
                assert!(
                    gpus as i32 <= job.spec.max_gpus.max(job.spec.min_gpus),
                    "{id} above its maximum"
                );
            } else {
                assert!(job.nodes.is_empty());
            }
        }
    }
}

#[test]
fn random_streams_keep_invariants_and_replay_byte_identically() {
    for seed in 0..20 {
        let inputs = random_stream(seed, 150);
        let (mut first, mut second) = (planner(PolicyName::Unicron), planner(PolicyName::Unicron));
        let mut out_first = Vec::new();
        for input in &inputs {
            out_first.push(format!("{:?}", first.apply(input)));
            check_invariants(&first);
        }
        let out_second: Vec<String> = inputs
            .iter()
            .map(|i| format!("{:?}", second.apply(i)))
            .collect();
        assert_eq!(out_first, out_second, "seed {seed}");
    }
}

#[test]
fn clusters_never_see_each_other() {
    let inputs = random_stream(7, 200);
    let mut both = planner(PolicyName::Unicron);
    let mut only_a = planner(PolicyName::Unicron);
    let mut from_both = Vec::new();
    let mut from_a = Vec::new();
    for input in &inputs {
        let out = both.apply(input);
        for o in &out {
            if let Output::Command(c) = o {
                assert_eq!(c.cluster, input.event.cluster());
                assert!(c.id.starts_with(&format!("c:{}:", c.cluster)));
            }
        }
        if input.event.cluster() == "a" {
            from_both.push(format!("{out:?}"));
            from_a.push(format!("{:?}", only_a.apply(input)));
        }
    }
    assert_eq!(
        from_both, from_a,
        "cluster b's events changed cluster a's decisions"
    );
    assert_eq!(both.cluster("a"), only_a.cluster("a"));
}

#[test]
fn commands_are_signed_and_verify() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    two_jobs(&mut p, &mut feed, "a");
    let cmds = commands(&p.apply(&feed.failure("a", "n1", FailureKind::EccError)));
    let public = CommandSigner::from_seed("test", [1; 32]).verifying_key();
    for c in &cmds {
        assert_eq!(c.key_id, "test");
        signing::verify(c, |id| (id == "test").then_some(public)).unwrap();
    }
}

/// A recorded stream as replay sees it: each decision with its trigger
/// input and commands, from a live planner's outputs.
fn record(inputs: &[Input]) -> Vec<unicron_core::replay::RecordedStep> {
    let mut live = planner(PolicyName::Unicron);
    let mut steps = Vec::new();
    for input in inputs {
        let out = live.apply(input);
        if let Some(Output::Decision(decision)) = out.first() {
            steps.push(unicron_core::replay::RecordedStep {
                input: Some(input.clone()),
                decision: decision.clone(),
                commands: commands(&out),
            });
        }
    }
    steps
}

#[test]
fn replay_of_a_recorded_stream_re_derives_every_decision() {
    use unicron_core::replay::replay_planner;
    let steps = record(&random_stream(17, 400));
    assert!(steps.len() > 300, "{}", steps.len());
    // The auditor has no signing key: another key, same decisions.
    let mut auditor = Planner::new(
        PlannerConfig::default(),
        CommandSigner::from_seed("audit", [0; 32]),
    );
    let (comparison, _) = replay_planner(&mut auditor, &steps, |_| true);
    assert_eq!(comparison.compared, steps.len() as u64);
    assert_eq!(comparison.diverged, 0, "{:#?}", comparison.first_divergence);
}

#[test]
fn replay_reports_an_altered_command_with_both_versions() {
    use unicron_core::replay::replay_planner;
    let mut steps = record(&random_stream(17, 400));
    let (at, index) = steps
        .iter()
        .enumerate()
        .find_map(|(i, s)| (!s.commands.is_empty()).then_some((i, 0)))
        .expect("some decision has a command");
    steps[at].commands[index].nodes = vec!["n99".into()];
    let mut auditor = planner(PolicyName::Unicron);
    let (comparison, _) = replay_planner(&mut auditor, &steps, |_| true);
    assert_eq!(comparison.diverged, 1);
    let first = comparison.first_divergence.unwrap();
    assert_eq!(first.what, "command");
    assert_eq!(first.id, steps[at].commands[index].id);
    assert_eq!(first.recorded["nodes"], serde_json::json!(["n99"]));
    assert_ne!(first.replayed["nodes"], serde_json::json!(["n99"]));
}

#[test]
fn a_what_if_policy_reports_changed_commands_and_waf() {
    use unicron_core::replay::{accumulated_waf, diff_commands, replay_planner};
    let steps = record(&random_stream(5, 300));
    let mut other = planner(PolicyName::CheckpointRestart);
    let (_, what_if) = replay_planner(&mut other, &steps, |_| true);
    let diff = diff_commands(&steps, &what_if);
    assert!(diff.added + diff.removed > 0, "{diff:?}");
    let end = steps.last().unwrap().decision.time_ms;
    let recorded = accumulated_waf(steps.iter().map(|s| &s.decision), end);
    let alternative = accumulated_waf(what_if.iter().filter_map(|r| r.decision.as_ref()), end);
    assert!(recorded > 0.0 && alternative > 0.0);
    assert_ne!(recorded, alternative);
}

/// Two agent-launched jobs on four nodes, with node addresses.
fn agent_jobs(planner: &mut Planner, feed: &mut Feed, budget: Option<i32>) {
    for n in 1..=4 {
        let mut joined = feed.node_joined("c", &format!("n{n}"));
        if let InputEvent::Cluster(e) = &mut joined.event {
            e.address = Some(format!("10.0.0.{n}"));
        }
        planner.apply(&joined);
    }
    for (id, port) in [("big", 29600), ("small", 30600)] {
        let mut job = feed.job("c", id, 8, 16, 1, &[(8, 1.0e15), (16, 2.0e15)]);
        if let InputEvent::Cluster(e) = &mut job.event {
            e.launch = Some(AgentLaunch {
                master_port_base: port,
                restart_budget: budget,
            });
        }
        planner.apply(&job);
    }
}

fn result_from(feed: &mut Feed, command: &Command, node: &str, status: CommandStatus) -> Input {
    let mut input = feed.result(command, status);
    if let InputEvent::Result(r) = &mut input.event {
        r.node = Some(node.to_string());
    }
    input
}

#[test]
fn starts_of_agent_jobs_carry_the_rendezvous_and_bump_the_generation() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    agent_jobs(&mut p, &mut feed, None);
    let cmds = commands(&p.apply(&feed.failure("c", "n2", FailureKind::CudaError)));
    assert_eq!(cmds.len(), 1);
    let restart = &cmds[0];
    assert_eq!(restart.action, CommandAction::Restart);
    // Every node of the job in rank order, though a restart keeps them.
    assert_eq!(restart.nodes, ["n1", "n2"]);
    let rdv = restart.rendezvous.as_ref().expect("an agent job's start");
    assert_eq!(rdv.master_addr, "10.0.0.1");
    let generation = rdv.generation;
    assert!(generation >= 2, "the first start was generation 1");
    assert_eq!(rdv.master_port, 29600 + generation as i32);
    let again = commands(&p.apply(&feed.failure("c", "n1", FailureKind::OutOfMemory)));
    assert_eq!(
        again[0].rendezvous.as_ref().unwrap().generation,
        generation + 1
    );
    // The signature covers the rendezvous: changing it breaks verification.
    let key = CommandSigner::from_seed("test", [1; 32]).verifying_key();
    let mut forged = restart.clone();
    assert!(signing::verify(&forged, |_| Some(key)).is_ok());
    forged.rendezvous.as_mut().unwrap().master_addr = "10.6.6.6".into();
    assert!(signing::verify(&forged, |_| Some(key)).is_err());
}

/// `node` reports snapshots of `job` (rank, step, replica) of generation 1.
fn stored(feed: &mut Feed, node: &str, job: &str, held: &[(i32, i64, bool)]) -> Input {
    let mut input = feed.node_joined("c", node);
    if let InputEvent::Cluster(e) = &mut input.event {
        e.kind = ClusterEventKind::SnapshotsStored;
        e.gpus = None;
        e.snapshots = held
            .iter()
            .map(|&(rank, step, replica)| SnapshotHeld {
                job: job.into(),
                rank,
                step,
                generation: 1,
                local_world: 1,
                bytes: 1000,
                replica,
                // Each own snapshot blocked its worker 50 ms of a 1 s step;
                // each replica took 200 ms to land.
                block_us: if replica { 0 } else { 50_000 },
                step_us: if replica { 0 } else { 1_000_000 },
                transfer_us: if replica { 200_000 } else { 0 },
            })
            .collect();
    }
    input
}

#[test]
fn a_restart_resumes_every_rank_at_one_snapshot_step_and_prices_itself_from_restores() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    agent_jobs(&mut p, &mut feed, None);
    // The agents announce their snapshot services (restarted: none held).
    for n in 1..=4 {
        let mut joined = feed.node_joined("c", &format!("n{n}"));
        if let InputEvent::Cluster(e) = &mut joined.event {
            e.address = Some(format!("10.0.0.{n}"));
            e.snapshot_address = Some(format!("10.0.0.{n}:7000"));
        }
        p.apply(&joined);
    }
    // big runs on n1, n2 (rank order); n2's rank 1 did not finish saving 12.
    for input in [
        stored(
            &mut feed,
            "n1",
            "big",
            &[(0, 11, false), (0, 12, false), (1, 11, true)],
        ),
        stored(
            &mut feed,
            "n2",
            "big",
            &[(1, 10, false), (1, 11, false), (0, 12, true)],
        ),
    ] {
        let out = p.apply(&input);
        assert!(commands(&out).is_empty());
        assert!(decision(&out).reason.contains("more snapshots"));
    }
    let restart = commands(&p.apply(&feed.failure("c", "n2", FailureKind::CudaError)))[0].clone();
    let plan = restart.snapshots.as_ref().expect("a start of an agent job");
    assert_eq!(plan.step, Some(11), "{}", plan.reason);
    assert_eq!(
        plan.sources
            .iter()
            .map(|s| (s.rank, s.node.as_str()))
            .collect::<Vec<_>>(),
        [(0, "n1"), (1, "n2")]
    );
    assert_eq!(plan.replica_holders, ["n2", "n1"]);
    // The interval from the measured costs: no failure history yet, so
    // Young's √(2 · 0.05 s · 86400 s) = 92.95 s, 93 steps of 1 s.
    assert_eq!(plan.interval_steps, 93, "{}", plan.interval_reason);
    assert!(
        plan.interval_reason.contains("set by Young's interval"),
        "{}",
        plan.interval_reason
    );
    let reason = decision(&p.apply(&feed.failure("c", "n1", FailureKind::OutOfMemory))).reason;
    assert!(reason.contains("big 600.0 s (configured)"), "{reason}");

    // The agents measured the restart: 2.5 s for its slowest rank.
    for (rank, ms) in [(0, 1800), (1, 2500)] {
        let mut input = feed.node_joined("c", "n1");
        if let InputEvent::Cluster(e) = &mut input.event {
            e.kind = ClusterEventKind::JobRestored;
            e.restored = Some(Box::new(RestoreReport {
                job: "big".into(),
                rank,
                generation: 2,
                command_id: restart.id.clone(),
                action: "restart".into(),
                source: "memory".into(),
                step: Some(11),
                bytes: 1000,
                restore_ms: ms,
            }));
        }
        p.apply(&input);
    }
    let reason = decision(&p.apply(&feed.failure("c", "n2", FailureKind::CudaError))).reason;
    assert!(reason.contains("big 2.5 s (measured)"), "{reason}");
}

#[test]
fn a_start_is_done_when_every_named_node_has_answered() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    agent_jobs(&mut p, &mut feed, None);
    let restart = commands(&p.apply(&feed.failure("c", "n2", FailureKind::CudaError)))[0].clone();
    let out = p.apply(&result_from(
        &mut feed,
        &restart,
        "n1",
        CommandStatus::Succeeded,
    ));
    assert!(
        decision(&out).reason.contains("1 more nodes to answer"),
        "{}",
        decision(&out).reason
    );
    assert!(p.cluster("c").unwrap().in_flight.contains_key(&restart.id));
    let out = p.apply(&result_from(
        &mut feed,
        &restart,
        "n2",
        CommandStatus::Succeeded,
    ));
    assert!(
        decision(&out).reason.contains("succeeded"),
        "{}",
        decision(&out).reason
    );
    assert!(!p.cluster("c").unwrap().in_flight.contains_key(&restart.id));

    // One node failing is enough to escalate.
    let restart = commands(&p.apply(&feed.failure("c", "n1", FailureKind::OutOfMemory)))[0].clone();
    assert_eq!(restart.action, CommandAction::Restart);
    p.apply(&result_from(
        &mut feed,
        &restart,
        "n1",
        CommandStatus::Succeeded,
    ));
    let out = p.apply(&result_from(
        &mut feed,
        &restart,
        "n2",
        CommandStatus::Failed,
    ));
    assert!(
        decision(&out).reason.contains("failed"),
        "{}",
        decision(&out).reason
    );
    assert!(!p.cluster("c").unwrap().in_flight.contains_key(&restart.id));
}

#[test]
fn a_spent_restart_budget_needs_an_operator() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    agent_jobs(&mut p, &mut feed, Some(1));
    let first = commands(&p.apply(&feed.failure("c", "n2", FailureKind::CudaError)));
    assert_eq!(first.len(), 1);
    let out = p.apply(&feed.failure("c", "n1", FailureKind::OutOfMemory));
    assert!(commands(&out).is_empty());
    assert!(
        decision(&out).reason.contains("restart budget of 1"),
        "{}",
        decision(&out).reason
    );
}

#[test]
fn an_agent_restarting_on_an_isolated_node_does_not_give_it_back() {
    let (mut p, mut feed) = (planner(PolicyName::Unicron), Feed::new());
    agent_jobs(&mut p, &mut feed, None);
    let job_on_n4 = p.cluster("c").unwrap().job_on("n4").unwrap().to_string();
    let cmds = commands(&p.apply(&feed.failure("c", "n4", FailureKind::EccError)));
    // The isolation names the agent job n4 leaves, for the scheduler.
    assert_eq!(cmds[0].action, CommandAction::IsolateNode);
    assert_eq!(cmds[0].job.as_deref(), Some(job_on_n4.as_str()));
    // Its agent dying after the isolation changes nothing more, though
    // the detector still names the job the node ran.
    let mut lost = feed.failure("c", "n4", FailureKind::LostConnection);
    if let InputEvent::Failure(f) = &mut lost.event {
        f.job = Some(job_on_n4.clone());
    }
    let out = p.apply(&lost);
    assert!(commands(&out).is_empty(), "{out:?}");
    assert!(decision(&out).reason.contains("already out of service"));
    assert_eq!(
        p.cluster("c").unwrap().nodes["n4"].health,
        planner::Health::Isolated
    );
    p.apply(&feed.node_joined("c", "n4"));
    assert_eq!(
        p.cluster("c").unwrap().nodes["n4"].health,
        planner::Health::Isolated
    );
}
