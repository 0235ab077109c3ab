//! Metric rules: DCGM XIDs, error counters that increase, gauges that cross.

use std::collections::BTreeMap;

use crate::records::MetricSample;
use crate::taxonomy::FailureKind;

use super::config::DetectorConfig;
use super::rules::LogRules;

/// dcgm-exporter's last-value XID field: holds only the newest XID code.
pub const XID_LAST: &str = "DCGM_FI_DEV_XID_ERRORS";
/// dcgm-exporter's XID counter, one series per `xid` label.
pub const XID_COUNT: &str = "DCGM_EXP_XID_ERRORS_COUNT";

/// One series: node, GPU, metric, and the `xid` label where it matters.
type SeriesKey = (String, Option<i32>, String, Option<String>);

/// Last values of the series the rules watch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricState {
    last: BTreeMap<SeriesKey, f64>,
}

impl MetricState {
    /// Observes one sample; returns the failures it signals as (kind, rule),
    /// or why the sample is unusable. Metrics no rule watches are ignored,
    /// whatever their value.
    pub fn observe(
        &mut self,
        config: &DetectorConfig,
        rules: &LogRules,
        node: &str,
        sample: &MetricSample,
    ) -> Result<Vec<(FailureKind, String)>, String> {
        // Case-insensitive: OpenTelemetry instrument names are (its SDKs
        // lower-case them), Prometheus/DCGM names are upper-case.
        let is = |a: &str| sample.name.eq_ignore_ascii_case(a);
        let counter = config.counter_rules.iter().find(|r| is(&r.metric));
        let gauge = config.gauge_rules.iter().find(|r| is(&r.metric));
        let (xid_last, xid_count) = (is(XID_LAST), is(XID_COUNT));
        let watched = xid_last || xid_count || counter.is_some() || gauge.is_some();
        if !watched {
            return Ok(Vec::new());
        }
        if !sample.value.is_finite() {
            return Err(format!("value {} is not a finite number", sample.value));
        }
        let xid_label = if xid_count {
            Some(
                sample
                    .labels
                    .get("xid")
                    .cloned()
                    .ok_or_else(|| format!("{} without an `xid` label", sample.name))?,
            )
        } else {
            None
        };
        // One series per canonical name, whatever case it arrived in.
        let name = match (counter, gauge) {
            _ if xid_last => XID_LAST,
            _ if xid_count => XID_COUNT,
            (Some(rule), _) => rule.metric.as_str(),
            (None, Some(rule)) => rule.metric.as_str(),
            (None, None) => unreachable!("watched"),
        };
        let key = (
            node.to_string(),
            sample.gpu,
            name.to_string(),
            xid_label.clone(),
        );
        let previous = self.last.insert(key, sample.value);
        let mut found = Vec::new();
        if xid_last {
            // A new non-zero code is a new XID; a repeated scrape is not.
            if sample.value != 0.0
                && previous != Some(sample.value)
                && let Some(kind) = xid_kind(rules, sample.value)
            {
                found.push((kind, format!("dcgm.xid.{}", sample.value as u32)));
            }
        } else if let Some(xid) = xid_label {
            let code: f64 = xid
                .parse()
                .map_err(|_| format!("`xid` label `{xid}` is not a number"))?;
            if previous.is_some_and(|p| sample.value - p >= 1.0)
                && let Some(kind) = xid_kind(rules, code)
            {
                found.push((kind, format!("dcgm.xid_count.{xid}")));
            }
        }
        if let Some(rule) = counter
            && previous.is_some_and(|p| sample.value - p >= rule.min_increase)
        {
            found.push((rule.kind, format!("counter.{}", rule.metric)));
        }
        if let Some(rule) = gauge
            && sample.value > rule.above
            && previous.is_none_or(|p| p <= rule.above)
        {
            found.push((rule.kind, format!("gauge.{}", rule.metric)));
        }
        Ok(found)
    }
}

fn xid_kind(rules: &LogRules, code: f64) -> Option<FailureKind> {
    if code < 0.0 || code.fract() != 0.0 || code > u32::MAX as f64 {
        return Some(FailureKind::Unknown);
    }
    rules.xid_kind(code as u32)
}
