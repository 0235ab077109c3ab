//! How much each cluster may send through the ingress
//! (`kafka.cluster_topics`): a token bucket per cluster, in records and in
//! bytes, refilled by the records' own broker timestamps (the clusters'
//! topics carry `LogAppendTime`, which no writer sets), so a flood from one
//! cluster is cut off before it reaches the shared topics every other
//! cluster's records go through. No wall clock: the same records in the
//! same order get the same verdicts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A cluster's allowance. Zero turns a dimension off.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// Records a second a cluster may send on average.
    pub records_per_s: f64,
    /// Payload bytes a second a cluster may send on average.
    pub bytes_per_s: f64,
    /// Seconds of allowance a quiet cluster saves up: a burst (a restart's
    /// backlog, an agent flushing what it queued while the broker was
    /// away) of this many seconds' worth passes whole.
    pub burst_s: f64,
}

impl Default for BudgetConfig {
    /// Generous: about 3x what 2,000 nodes send (a heartbeat, a telemetry
    /// batch and a few log lines a second each), so only a runaway
    /// writer meets it.
    fn default() -> Self {
        BudgetConfig {
            records_per_s: 20_000.0,
            bytes_per_s: 64.0 * 1024.0 * 1024.0,
            burst_s: 30.0,
        }
    }
}

impl BudgetConfig {
    /// The first setting at fault.
    pub fn validate(&self) -> Result<(), String> {
        for (field, value) in [
            ("records_per_s", self.records_per_s),
            ("bytes_per_s", self.bytes_per_s),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(format!(
                    "{field}: {value} is not 0 (off) or a positive rate"
                ));
            }
        }
        if !(self.burst_s.is_finite() && self.burst_s >= 1.0) {
            return Err(format!("burst_s: {} is not 1 second or more", self.burst_s));
        }
        Ok(())
    }
}

/// Why a record was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    Records,
    Bytes,
}

impl OverBudget {
    /// The reason in metrics and logs.
    pub fn reason(self) -> &'static str {
        match self {
            OverBudget::Records => "over_budget_records",
            OverBudget::Bytes => "over_budget_bytes",
        }
    }
}

#[derive(Debug, Clone)]
struct Bucket {
    records: f64,
    bytes: f64,
    /// The newest timestamp seen: time only moves forward.
    at_ms: i64,
}

/// Every cluster's bucket.
#[derive(Debug, Clone, Default)]
pub struct Budget {
    config: BudgetConfig,
    buckets: BTreeMap<String, Bucket>,
}

impl Budget {
    pub fn new(config: BudgetConfig) -> Budget {
        Budget {
            config,
            buckets: BTreeMap::new(),
        }
    }

    /// Takes one record of `bytes` for `cluster` at `time_ms` (its broker
    /// timestamp) from the cluster's allowance, or says which allowance
    /// it would overdraw (and takes nothing).
    pub fn admit(&mut self, cluster: &str, time_ms: i64, bytes: usize) -> Result<(), OverBudget> {
        let c = self.config;
        let full = |rate: f64| rate * c.burst_s;
        let bucket = self
            .buckets
            .entry(cluster.to_string())
            .or_insert_with(|| Bucket {
                records: full(c.records_per_s),
                bytes: full(c.bytes_per_s),
                at_ms: time_ms,
            });
        if time_ms > bucket.at_ms {
            let s = (time_ms - bucket.at_ms) as f64 / 1000.0;
            bucket.records = (bucket.records + s * c.records_per_s).min(full(c.records_per_s));
            bucket.bytes = (bucket.bytes + s * c.bytes_per_s).min(full(c.bytes_per_s));
            bucket.at_ms = time_ms;
        }
        if c.records_per_s > 0.0 && bucket.records < 1.0 {
            return Err(OverBudget::Records);
        }
        if c.bytes_per_s > 0.0 && bucket.bytes < bytes as f64 {
            return Err(OverBudget::Bytes);
        }
        bucket.records -= 1.0;
        bucket.bytes -= bytes as f64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(records_per_s: f64, bytes_per_s: f64) -> Budget {
        Budget::new(BudgetConfig {
            records_per_s,
            bytes_per_s,
            burst_s: 2.0,
        })
    }

    /// A flood from one cluster passes its saved-up burst, then its rate;
    /// another cluster's records pass all along.
    #[test]
    fn a_flooding_cluster_gets_its_rate_and_the_others_theirs() {
        let mut b = budget(10.0, 0.0);
        let mut passed = 0;
        // 1,000 records over 10 s: 100 a second.
        for i in 0..1_000 {
            if b.admit("a", i * 10, 100).is_ok() {
                passed += 1;
            }
            if i % 100 == 0 {
                assert_eq!(b.admit("b", i * 10, 100), Ok(()), "b at {i}");
            }
        }
        // 20 saved (2 s x 10/s) and 10 a second for the 10 s.
        assert!((118..=121).contains(&passed), "{passed}");
        assert_eq!(b.admit("a", 9_990, 1), Err(OverBudget::Records));
    }

    #[test]
    fn bytes_are_budgeted_apart_and_time_never_runs_back() {
        let mut b = budget(0.0, 1_000.0);
        assert_eq!(b.admit("a", 0, 1_500), Ok(()));
        assert_eq!(b.admit("a", 0, 600), Err(OverBudget::Bytes));
        // A record stamped earlier refills nothing.
        assert_eq!(b.admit("a", -5_000, 600), Err(OverBudget::Bytes));
        assert_eq!(b.admit("a", 1_000, 600), Ok(()));
    }

    #[test]
    fn settings_at_fault_are_named() {
        assert!(BudgetConfig::default().validate().is_ok());
        let bad = BudgetConfig {
            records_per_s: -1.0,
            ..BudgetConfig::default()
        };
        assert!(bad.validate().unwrap_err().starts_with("records_per_s:"));
    }
}
