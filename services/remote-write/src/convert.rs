//! A decoded `WriteRequest` into telemetry batches: pure, so what a request
//! becomes depends on the request and the label map alone.

use std::collections::BTreeMap;

use unicron_codec::formats::LabelMap;
use unicron_core::{MetricSample, TelemetryBatch};

use crate::proto::{WriteRequest, is_stale_marker};

/// `TelemetryBatch.source` of what this receiver publishes.
pub const SOURCE: &str = "prometheus-remote-write";

/// What one request became.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Converted {
    /// One batch per (cluster, node), in order of the node's first series
    /// in the request; samples in request order.
    pub batches: Vec<TelemetryBatch>,
    /// Series that had a node and at least one usable sample.
    pub series_kept: usize,
    /// Samples in `batches`.
    pub samples: usize,
    /// Series without any of the label map's node labels.
    pub no_node: usize,
    /// Series without a `__name__` label.
    pub no_name: usize,
    /// Stale markers dropped: a series that left its target, not a value.
    pub stale: usize,
}

/// Converts `request`: each series' labels name its node, cluster, GPU,
/// job and rank through `labels`, and every label but `__name__` (the
/// sample's name) stays on each of its samples.
pub fn convert(request: WriteRequest, labels: &LabelMap) -> Converted {
    let mut out = Converted::default();
    let mut order: Vec<(String, String)> = Vec::new();
    let mut by_node: BTreeMap<(String, String), Vec<MetricSample>> = BTreeMap::new();
    for series in request.timeseries {
        // Repeated label names are invalid in Prometheus; the last one wins here.
        let mut attrs: BTreeMap<String, String> = series
            .labels
            .into_iter()
            .map(|l| (l.name, l.value))
            .collect();
        let Some(name) = attrs.remove("__name__").filter(|n| !n.is_empty()) else {
            out.no_name += 1;
            continue;
        };
        let id = labels.identify(&attrs);
        let Some(node) = id.node.clone() else {
            out.no_node += 1;
            continue;
        };
        let mut kept = Vec::with_capacity(series.samples.len());
        for sample in series.samples {
            if is_stale_marker(sample.value) {
                out.stale += 1;
                continue;
            }
            kept.push(MetricSample {
                name: name.clone(),
                value: sample.value,
                time_ms: sample.timestamp,
                gpu: id.gpu,
                job: id.job.clone(),
                rank: id.rank,
                labels: attrs.clone(),
            });
        }
        if kept.is_empty() {
            continue;
        }
        out.series_kept += 1;
        out.samples += kept.len();
        let key = (id.cluster, node);
        let samples = by_node.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            Vec::new()
        });
        samples.extend(kept);
    }
    out.batches = order
        .into_iter()
        .map(|key| {
            let samples = by_node.remove(&key).unwrap_or_default();
            TelemetryBatch {
                cluster: key.0,
                node: key.1,
                source: SOURCE.into(),
                samples,
            }
        })
        .collect();
    out
}

/// Splits `batch` into batches whose samples together stay near `limit`
/// encoded bytes, halving until each fits (`encoded_len` measures one). A
/// single sample over the limit is returned alone; the caller drops it.
pub fn split_to_fit(
    batch: TelemetryBatch,
    limit: usize,
    encoded_len: &mut impl FnMut(&TelemetryBatch) -> usize,
) -> Vec<TelemetryBatch> {
    if batch.samples.len() <= 1 || encoded_len(&batch) <= limit {
        return vec![batch];
    }
    let mut first = batch;
    let rest = first.samples.split_off(first.samples.len() / 2);
    let second = TelemetryBatch {
        cluster: first.cluster.clone(),
        node: first.node.clone(),
        source: first.source.clone(),
        samples: rest,
    };
    let mut out = split_to_fit(first, limit, encoded_len);
    out.extend(split_to_fit(second, limit, encoded_len));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Label, STALE_NAN_BITS, Sample, TimeSeries};

    fn series(labels: &[(&str, &str)], samples: &[(f64, i64)]) -> TimeSeries {
        TimeSeries {
            labels: labels
                .iter()
                .map(|(n, v)| Label {
                    name: n.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            samples: samples
                .iter()
                .map(|&(value, timestamp)| Sample { value, timestamp })
                .collect(),
        }
    }

    #[test]
    fn series_become_one_batch_per_node_in_request_order() {
        let stale = f64::from_bits(STALE_NAN_BITS);
        let request = WriteRequest {
            timeseries: vec![
                series(
                    &[
                        ("__name__", "DCGM_FI_DEV_XID_ERRORS"),
                        ("Hostname", "node-b"),
                        ("gpu", "3"),
                        ("UUID", "GPU-1"),
                        ("job", "dcgm"),
                    ],
                    &[(0.0, 1000), (79.0, 2000)],
                ),
                series(
                    &[("__name__", "DCGM_FI_DEV_GPU_TEMP"), ("Hostname", "node-a")],
                    &[(40.0, 1000), (stale, 2000)],
                ),
                series(
                    &[("__name__", "up"), ("instance", "x:9400")],
                    &[(1.0, 1000)],
                ),
                series(&[("Hostname", "node-a")], &[(1.0, 1000)]),
                series(
                    &[
                        ("__name__", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
                        ("Hostname", "node-b"),
                        ("cluster", "c2"),
                    ],
                    &[(1.0, 2000)],
                ),
                series(
                    &[("__name__", "DCGM_FI_DEV_GPU_TEMP"), ("Hostname", "node-c")],
                    &[(stale, 2000)],
                ),
                series(
                    &[("__name__", "DCGM_FI_DEV_GPU_TEMP"), ("Hostname", "node-b")],
                    &[(41.0, 3000)],
                ),
            ],
            metadata: Vec::new(),
        };
        let out = convert(request, &LabelMap::default());
        let keys: Vec<_> = out
            .batches
            .iter()
            .map(|b| (b.cluster.as_str(), b.node.as_str(), b.samples.len()))
            .collect();
        assert_eq!(
            keys,
            [
                ("default", "node-b", 3),
                ("default", "node-a", 1),
                ("c2", "node-b", 1)
            ]
        );
        let xid = &out.batches[0].samples[1];
        assert_eq!(xid.name, "DCGM_FI_DEV_XID_ERRORS");
        assert_eq!((xid.value, xid.time_ms, xid.gpu), (79.0, 2000, Some(3)));
        // Prometheus' `job` is the scrape job, not a training job.
        assert_eq!(xid.job, None);
        assert_eq!(xid.labels.get("UUID").map(String::as_str), Some("GPU-1"));
        assert_eq!(xid.labels.get("job").map(String::as_str), Some("dcgm"));
        assert!(!xid.labels.contains_key("__name__"));
        assert_eq!(out.batches[0].source, SOURCE);
        assert_eq!((out.series_kept, out.samples), (4, 5));
        assert_eq!((out.no_node, out.no_name, out.stale), (1, 1, 2));
    }

    #[test]
    fn ordinary_nan_is_kept_and_only_the_stale_marker_dropped() {
        let request = WriteRequest {
            timeseries: vec![series(
                &[("__name__", "m"), ("Hostname", "n")],
                &[(f64::NAN, 1), (f64::from_bits(STALE_NAN_BITS), 2)],
            )],
            metadata: Vec::new(),
        };
        let out = convert(request, &LabelMap::default());
        assert_eq!((out.samples, out.stale), (1, 1));
        assert!(out.batches[0].samples[0].value.is_nan());
    }

    #[test]
    fn oversized_batches_are_halved_until_they_fit() {
        let batch = TelemetryBatch {
            cluster: "c".into(),
            node: "n".into(),
            source: SOURCE.into(),
            samples: (0..10)
                .map(|i| MetricSample {
                    name: format!("m{i}"),
                    value: 0.0,
                    time_ms: i,
                    gpu: None,
                    job: None,
                    rank: None,
                    labels: BTreeMap::new(),
                })
                .collect(),
        };
        let parts = split_to_fit(batch, 3, &mut |b| b.samples.len());
        let sizes: Vec<_> = parts.iter().map(|b| b.samples.len()).collect();
        assert_eq!(sizes, [2, 3, 2, 3]);
        let times: Vec<_> = parts
            .iter()
            .flat_map(|b| b.samples.iter().map(|s| s.time_ms))
            .collect();
        assert_eq!(times, (0..10).collect::<Vec<_>>());
    }
}
