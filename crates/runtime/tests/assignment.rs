//! The group's assignor keeps co-partitioned topics together: whoever holds
//! partition p of one planner input holds partition p of all three. The
//! planner relies on it (and refuses an assignment that breaks it).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use unicron_bus::Consumer;
use unicron_codec::{PlannerInputs, Topics};
use unicron_runtime::Membership;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_holds_the_same_partitions_of_every_planner_input() {
    let (broker, kafka) = unicron_bus::testing::embedded_with_topics();
    let names = Topics::new(&kafka);
    let inputs = PlannerInputs::TOPICS.map(|t| names.name(t).to_string());
    let members: Vec<(Consumer<Membership>, Membership)> = (0..4)
        .map(|_| {
            let membership = Membership::from_group_offsets("test");
            let consumer = Consumer::with_context(
                &kafka,
                broker.bootstrap_servers(),
                "t-assignment",
                membership.clone(),
            )
            .unwrap();
            let topics: Vec<&str> = inputs.iter().map(String::as_str).collect();
            consumer.subscribe(&topics).unwrap();
            (consumer, membership)
        })
        .collect();
    let partitions = 6;
    let started = Instant::now();
    loop {
        // Polling drives the group protocol; nothing is produced.
        for (consumer, _) in &members {
            let _ = tokio::time::timeout(Duration::from_millis(100), consumer.recv()).await;
        }
        let held: usize = members.iter().map(|(_, m)| m.assigned().len()).sum();
        if held == partitions * inputs.len() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the group did not assign every partition: {:?}",
            members
                .iter()
                .map(|(_, m)| m.assigned())
                .collect::<Vec<_>>()
        );
    }
    let mut covered = BTreeSet::new();
    for (_, membership) in &members {
        let assigned = membership.assigned();
        let of = |topic: &str| -> BTreeSet<i32> {
            assigned
                .iter()
                .filter(|(t, _)| t == topic)
                .map(|(_, p)| *p)
                .collect()
        };
        let first = of(&inputs[0]);
        assert!(!first.is_empty(), "a member holds nothing: {assigned:?}");
        for topic in &inputs[1..] {
            assert_eq!(of(topic), first, "{assigned:?}");
        }
        assert!(covered.is_disjoint(&first), "{covered:?} and {first:?}");
        covered.extend(first);
    }
    assert_eq!(covered, (0..partitions as i32).collect());
}
