//! What the ingress costs a record, one core: the check that it names its
//! topic's cluster (a full decode) and the cluster's budget.
//! `cargo bench -p unicron-ingress --bench ingress_check`; criterion prints
//! records/s as "thrpt".

use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use unicron_codec::schemas::RecordType;
use unicron_codec::{KafkaConfig, Topics};
use unicron_core::ingress_budget::{Budget, BudgetConfig};

fn ingress(c: &mut Criterion) {
    let topics = Topics::new(&KafkaConfig {
        cluster_topics: true,
        ..KafkaConfig::default()
    });
    let mut group = c.benchmark_group("ingress");
    group.throughput(Throughput::Elements(1));
    let topic = "unicron.in.c1";
    for (name, record, key) in [
        ("log_line", RecordType::LogRecord, &b"logs/node-0042"[..]),
        ("heartbeat", RecordType::AgentEvent, &b"agent/node-0042"[..]),
        (
            "telemetry_batch",
            RecordType::TelemetryBatch,
            &b"telemetry/node-0042"[..],
        ),
    ] {
        let bytes = unicron_codec::samples::encoded(record, true);
        println!("{name}: {} bytes", bytes.len());
        assert!(matches!(
            unicron_ingress::check(&topics, topic, key, &bytes),
            Some(unicron_ingress::Checked {
                verdict: unicron_ingress::Verdict::Pass { .. },
                ..
            })
        ));
        group.bench_function(format!("check_{name}"), |b| {
            b.iter(|| {
                unicron_ingress::check(&topics, black_box(topic), black_box(key), black_box(&bytes))
            })
        });
    }
    let mut budget = Budget::new(BudgetConfig::default());
    let mut at_ms = 0i64;
    group.bench_function("budget_admit_100_clusters", |b| {
        let clusters: Vec<String> = (0..100).map(|i| format!("c{i:03}")).collect();
        let mut i = 0usize;
        b.iter(|| {
            i += 1;
            at_ms += i as i64 % 2;
            budget.admit(black_box(&clusters[i % 100]), at_ms, 300)
        })
    });
    group.finish();
}

criterion_group!(benches, ingress);
criterion_main!(benches);
