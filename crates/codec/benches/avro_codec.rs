//! Avro encode/decode rate of a TelemetryBatch of 64 samples, one core.
//! `cargo bench -p unicron-codec --bench avro_codec`; criterion prints
//! records/s as "thrpt" (one element = one batch).

use std::collections::BTreeMap;

use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use unicron_codec::AvroCodec;
use unicron_core::{MetricSample, TelemetryBatch};

/// A DCGM-like scrape of one node: 8 GPUs × 8 metrics.
fn batch() -> TelemetryBatch {
    const METRICS: [&str; 8] = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_SM_CLOCK",
    ];
    let samples = (0..64)
        .map(|i| MetricSample {
            name: METRICS[i % 8].to_string(),
            value: i as f64 * 1.5,
            time_ms: 1_764_000_000_000 + i as i64,
            gpu: Some((i / 8) as i32),
            job: Some("gpt-13b".to_string()),
            rank: Some(i as i32),
            labels: BTreeMap::new(),
        })
        .collect();
    TelemetryBatch {
        cluster: "c1".to_string(),
        node: "node-0042".to_string(),
        source: "dcgm".to_string(),
        samples,
    }
}

fn codec(c: &mut Criterion) {
    let codec = AvroCodec::<TelemetryBatch>::default();
    let record = batch();
    let bytes = codec.encode(&record).unwrap();
    let mut group = c.benchmark_group("telemetry_batch_64");
    group.throughput(Throughput::Elements(1));
    group.bench_function("encode_serde_direct", |b| {
        b.iter(|| codec.encode(black_box(&record)).unwrap())
    });
    group.bench_function("encode_via_value", |b| {
        b.iter(|| codec.encode_via_value(black_box(&record)).unwrap())
    });
    group.bench_function("decode_via_value", |b| {
        b.iter(|| codec.decode(black_box(&bytes)).unwrap())
    });
    group.finish();
    println!(
        "encoded size: {} bytes per batch of 64 samples",
        bytes.len()
    );
}

criterion_group!(benches, codec);
criterion_main!(benches);
