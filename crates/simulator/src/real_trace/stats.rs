//! A real trace against the evaluation's model of failures: Poisson
//! arrivals, every node alike, a fixed repair time.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::RealTrace;

/// What the trace says, beside what the model assumes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TraceStats {
    pub faults: usize,
    pub servers: usize,
    pub span_days: f64,
    /// Hours between consecutive fault starts, cluster-wide.
    pub gap_mean_h: f64,
    pub gap_median_h: f64,
    /// Standard deviation over mean (an exponential's is 1).
    pub gap_cv: f64,
    /// Share of gaps under an hour.
    pub gaps_under_1h: f64,
    /// Share of gaps of zero: faults recorded at the same time.
    pub gaps_zero: f64,
    /// Servers with 0, 1, 2, 3-4 and 5 or more faults.
    pub servers_by_faults: [usize; 5],
    /// Share of the faults on the 5% most failing servers.
    pub top_5pct_share: f64,
    /// Share of faults that start within 7 days of the same server's
    /// previous repair.
    pub within_7d_of_repair: f64,
    pub repair_median_h: f64,
    pub repair_mean_h: f64,
    pub repair_p90_h: f64,
    pub repair_p99_h: f64,
    /// Sorted gaps, hours (for the plot).
    #[serde(skip)]
    pub gaps_h: Vec<f64>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// P(N = k) for N Poisson of mean `lambda`.
fn poisson(lambda: f64, k: u32) -> f64 {
    (0..k).fold((-lambda).exp(), |p, i| p * lambda / f64::from(i + 1))
}

impl TraceStats {
    pub fn of(trace: &RealTrace) -> TraceStats {
        let h = |s: f64| s / 3_600.0;
        let mut gaps_h: Vec<f64> = trace
            .faults
            .windows(2)
            .map(|w| h(w[1].start_s - w[0].start_s))
            .collect();
        gaps_h.sort_by(f64::total_cmp);
        let n = gaps_h.len().max(1) as f64;
        let gap_mean_h = gaps_h.iter().sum::<f64>() / n;
        let variance = gaps_h.iter().map(|g| (g - gap_mean_h).powi(2)).sum::<f64>() / n;
        let mut per_server: BTreeMap<&str, Vec<&super::RealFault>> = BTreeMap::new();
        for f in &trace.faults {
            per_server.entry(f.server.as_str()).or_default().push(f);
        }
        let mut servers_by_faults = [trace.servers - per_server.len(), 0, 0, 0, 0];
        for faults in per_server.values() {
            servers_by_faults[match faults.len() {
                1 => 1,
                2 => 2,
                3 | 4 => 3,
                _ => 4,
            }] += 1;
        }
        let mut counts: Vec<usize> = per_server.values().map(Vec::len).collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top = (trace.servers as f64 * 0.05).round() as usize;
        let total = trace.faults.len().max(1) as f64;
        let within_7d = per_server
            .values()
            .flat_map(|faults| faults.windows(2))
            .filter(|w| w[1].start_s - w[0].end_s < 7.0 * 86_400.0)
            .count();
        let mut repairs: Vec<f64> = trace.faults.iter().map(|f| h(f.repair_s())).collect();
        repairs.sort_by(f64::total_cmp);
        TraceStats {
            faults: trace.faults.len(),
            servers: trace.servers,
            span_days: trace.span_s / 86_400.0,
            gap_mean_h,
            gap_median_h: quantile(&gaps_h, 0.5),
            gap_cv: variance.sqrt() / gap_mean_h.max(f64::MIN_POSITIVE),
            gaps_under_1h: gaps_h.iter().filter(|g| **g < 1.0).count() as f64 / n,
            gaps_zero: gaps_h.iter().filter(|g| **g == 0.0).count() as f64 / n,
            servers_by_faults,
            top_5pct_share: counts.iter().take(top).sum::<usize>() as f64 / total,
            within_7d_of_repair: within_7d as f64 / total,
            repair_median_h: quantile(&repairs, 0.5),
            repair_mean_h: repairs.iter().sum::<f64>() / repairs.len().max(1) as f64,
            repair_p90_h: quantile(&repairs, 0.9),
            repair_p99_h: quantile(&repairs, 0.99),
            gaps_h,
        }
    }

    /// What the model predicts for the same count of faults on the same
    /// servers over the same span: Poisson arrivals, every server alike.
    fn model(&self) -> Model {
        let lambda = self.faults as f64 / self.servers as f64;
        let servers = self.servers as f64;
        let share = |k: u32| poisson(lambda, k) * servers;
        let five_or_more = servers - (0..5).map(share).sum::<f64>();
        // The most failing 5% under the model: servers taken from the
        // highest count down.
        let mut left = (servers * 0.05).round();
        let mut top_faults = 0.0;
        for k in (0..=40).rev() {
            let take = share(k).min(left);
            top_faults += take * f64::from(k);
            left -= take;
        }
        let per_server_day = lambda / self.span_days;
        Model {
            gaps_under_1h: 1.0 - (-1.0 / self.gap_mean_h).exp(),
            gap_median_h: self.gap_mean_h * std::f64::consts::LN_2,
            servers_by_faults: [
                share(0),
                share(1),
                share(2),
                share(3) + share(4),
                five_or_more,
            ],
            top_5pct_share: top_faults / self.faults as f64,
            // Every fault but a server's first follows an exponential gap.
            within_7d_of_repair: (1.0 - (-7.0 * per_server_day).exp())
                * (lambda - (1.0 - poisson(lambda, 0)))
                / lambda.max(f64::MIN_POSITIVE),
        }
    }

    /// The trace beside the model, as Markdown; `repair_h` is the fixed
    /// repair the drawn scenarios assume.
    pub fn markdown(&self, repair_h: f64) -> String {
        let m = self.model();
        let pct = |v: f64| format!("{:.1}%", v * 100.0);
        let mut out = format!(
            "{} faults on {} servers over {:.0} days.\n\n| | the trace | the model (Poisson, every server alike) |\n|---|---:|---:|\n",
            self.faults, self.servers, self.span_days
        );
        let mut row = |what: &str, trace: String, model: String| {
            let _ = writeln!(out, "| {what} | {trace} | {model} |");
        };
        row(
            "hours between failures, mean",
            format!("{:.1}", self.gap_mean_h),
            format!("{:.1}", self.gap_mean_h),
        );
        row(
            "hours between failures, median",
            format!("{:.1}", self.gap_median_h),
            format!("{:.1}", m.gap_median_h),
        );
        row(
            "coefficient of variation of the gaps",
            format!("{:.2}", self.gap_cv),
            "1.00".into(),
        );
        row(
            "gaps under an hour",
            pct(self.gaps_under_1h),
            pct(m.gaps_under_1h),
        );
        row(
            "gaps of zero (faults recorded together)",
            pct(self.gaps_zero),
            "0.0%".into(),
        );
        for (i, label) in ["0", "1", "2", "3-4", "5 or more"].iter().enumerate() {
            row(
                &format!("servers with {label} faults"),
                self.servers_by_faults[i].to_string(),
                format!("{:.0}", m.servers_by_faults[i]),
            );
        }
        row(
            "faults on the 5% most failing servers",
            pct(self.top_5pct_share),
            pct(m.top_5pct_share),
        );
        row(
            "faults within 7 days of the same server's repair",
            pct(self.within_7d_of_repair),
            pct(m.within_7d_of_repair),
        );
        row(
            "repair, hours: median / mean",
            format!("{:.1} / {:.1}", self.repair_median_h, self.repair_mean_h),
            format!("{repair_h:.1} / {repair_h:.1}"),
        );
        row(
            "repair, hours: p90 / p99",
            format!("{:.0} / {:.0}", self.repair_p90_h, self.repair_p99_h),
            format!("{repair_h:.1} / {repair_h:.1}"),
        );
        out
    }

    /// An SVG of the gaps' distribution against the exponential of the same
    /// mean (log-scaled hours).
    pub fn svg(&self) -> String {
        let (w, h, pad) = (720.0, 360.0, 56.0);
        let (lo, hi) = (0.01_f64.ln(), 1_000.0_f64.ln());
        let x = |hours: f64| {
            pad + (w - 2.0 * pad) * ((hours.max(0.01).ln() - lo) / (hi - lo)).clamp(0.0, 1.0)
        };
        let y = |share: f64| h - pad - (h - 2.0 * pad) * share;
        let mut out = format!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="{w}" height="{h}" fill="#fff"/>
<text x="{pad}" y="20">hours between failures, cumulative share: the InfiniteHBD trace against Poisson arrivals of the same mean (gaps of zero at 0.01)</text>
"##
        );
        for share in [0.0, 0.25, 0.5, 0.75, 1.0] {
            let _ = writeln!(
                out,
                r##"<line x1="{pad}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="4" y="{:.1}">{:.0}%</text>"##,
                w - pad,
                y(share) + 4.0,
                share * 100.0,
                y = y(share)
            );
        }
        for hours in [0.01, 0.1, 1.0, 10.0, 100.0, 1_000.0] {
            let _ = writeln!(
                out,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{pad}" y2="{}" stroke="#eee"/><text x="{:.1}" y="{}">{hours}</text>"##,
                h - pad,
                x(hours) - 8.0,
                h - pad + 16.0,
                x = x(hours)
            );
        }
        let n = self.gaps_h.len().max(1) as f64;
        let trace: Vec<String> = self
            .gaps_h
            .iter()
            .enumerate()
            .map(|(i, g)| format!("{:.1},{:.1}", x(*g), y((i + 1) as f64 / n)))
            .collect();
        let model: Vec<String> = (0..=200)
            .map(|i| {
                let hours = (lo + (hi - lo) * f64::from(i) / 200.0).exp();
                format!(
                    "{:.1},{:.1}",
                    x(hours),
                    y(1.0 - (-hours / self.gap_mean_h).exp())
                )
            })
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="#c9341b" stroke-width="2" points="{}"/><polyline fill="none" stroke="#1b6ac9" stroke-width="2" stroke-dasharray="6,4" points="{}"/>"##,
            trace.join(" "),
            model.join(" ")
        );
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" fill="#c9341b">the trace</text><text x="{}" y="{}" fill="#1b6ac9">exponential, same mean</text><text x="{}" y="{}">hours (log scale)</text></svg>"##,
            pad + 10.0,
            pad + 10.0,
            pad + 10.0,
            pad + 26.0,
            w / 2.0 - 40.0,
            h - 12.0
        );
        out
    }
}

struct Model {
    gaps_under_1h: f64,
    gap_median_h: f64,
    servers_by_faults: [f64; 5],
    top_5pct_share: f64,
    within_7d_of_repair: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_is_burstier_and_more_concentrated_than_the_model() {
        let stats = TraceStats::of(&RealTrace::infinitehbd());
        assert_eq!(stats.faults, 584);
        assert_eq!(stats.servers_by_faults.iter().sum::<usize>(), 400);
        assert_eq!(stats.servers_by_faults[0], 169);
        let model = stats.model();
        // Counted, not assumed: these hold for the trace shipped.
        assert!(stats.gap_cv > 1.2, "{}", stats.gap_cv);
        assert!(stats.gaps_under_1h > model.gaps_under_1h, "{stats:?}");
        assert!(
            stats.top_5pct_share > 1.5 * model.top_5pct_share,
            "{stats:?}"
        );
        assert!(stats.servers_by_faults[4] as f64 > 3.0 * model.servers_by_faults[4]);
        assert!(stats.repair_p99_h > 24.0 * 30.0, "{}", stats.repair_p99_h);
        let table = stats.markdown(2.0);
        assert_eq!(table.matches("\n|").count(), 16, "{table}");
        assert!(stats.svg().contains("<polyline"));
    }

    #[test]
    fn poisson_shares_sum_to_one() {
        let total: f64 = (0..60).map(|k| poisson(1.46, k)).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert!((poisson(2.0, 0) - (-2.0_f64).exp()).abs() < 1e-12);
    }
}
