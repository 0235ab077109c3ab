//! What the clusters bench measures over time: the process's resident
//! memory and the planner's RocksDB size, sampled every few seconds; the
//! least-squares slope of both after a warm-up; latency histograms of fixed
//! size (a long run must not grow the memory it measures); and sums read
//! from the process's Prometheus registry.

use std::path::Path;
use std::time::Duration;

/// One sample of the process.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Seconds since the measured phase began.
    pub t_s: f64,
    pub rss_mb: f64,
    pub state_mb: f64,
    /// Decisions consumed so far.
    pub decisions: usize,
}

pub fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

pub fn dir_mb(path: &Path) -> f64 {
    let mut total = 0u64;
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += (dir_mb(&e.path()) * 1_048_576.0) as u64,
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total as f64 / 1_048_576.0
}

/// The growth of `value` in MB per hour: samples after `warmup_s` are
/// grouped into consecutive windows that each span at least
/// `min_decisions` decisions (so a point averages over real work, not over
/// one burst), each window becomes one point (mean time, mean value), and
/// a least-squares line goes through the points. `None` below three points.
pub fn slope_mb_per_h(
    samples: &[Sample],
    warmup_s: f64,
    min_decisions: usize,
    value: impl Fn(&Sample) -> f64,
) -> Option<(f64, usize)> {
    let mut points = Vec::new();
    let mut window: Vec<&Sample> = Vec::new();
    for sample in samples.iter().filter(|s| s.t_s >= warmup_s) {
        window.push(sample);
        let spanned = sample.decisions - window[0].decisions;
        if spanned >= min_decisions {
            let n = window.len() as f64;
            let t = window.iter().map(|s| s.t_s).sum::<f64>() / n;
            let v = window.iter().map(|s| value(s)).sum::<f64>() / n;
            points.push((t / 3600.0, v));
            // The next window starts where this one ended.
            window = vec![sample];
        }
    }
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mean_t = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_v = points.iter().map(|p| p.1).sum::<f64>() / n;
    let covariance: f64 = points.iter().map(|p| (p.0 - mean_t) * (p.1 - mean_v)).sum();
    let variance: f64 = points.iter().map(|p| (p.0 - mean_t).powi(2)).sum();
    Some((covariance / variance, points.len()))
}

/// Latencies in logarithmic buckets 1% wide from 0.1 ms to about an hour:
/// fixed memory however long the run, percentiles within 1%.
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_ms: f64,
}

const SMALLEST_MS: f64 = 0.1;
const GROWTH: f64 = 1.01;
const BUCKETS: usize = 1800;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max_ms: 0.0,
        }
    }
}

impl Histogram {
    pub fn record(&mut self, latency: Duration) {
        let ms = latency.as_secs_f64() * 1e3;
        let bucket = if ms <= SMALLEST_MS {
            0
        } else {
            ((ms / SMALLEST_MS).ln() / GROWTH.ln()).ceil() as usize
        };
        self.counts[bucket.min(BUCKETS - 1)] += 1;
        self.total += 1;
        self.max_ms = self.max_ms.max(ms);
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    /// The `p` quantile in milliseconds (the bucket's upper bound); 0 when empty.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((self.total - 1) as f64 * p).round() as u64;
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen > rank {
                return (SMALLEST_MS * GROWTH.powi(bucket as i32)).min(self.max_ms);
            }
        }
        self.max_ms
    }

    /// `{"n", "p50_ms", "p99_ms", "max_ms"}`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "n": self.total,
            "p50_ms": self.percentile_ms(0.5),
            "p99_ms": self.percentile_ms(0.99),
            "max_ms": self.max_ms,
        })
    }
}

/// The sum of the samples of metric `name` whose labels contain every
/// `key="value"` of `labels`, from a Prometheus text rendering.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|l| rest.contains(l)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Takes a [`Sample`] every `every` from its creation on.
pub struct Sampler {
    began: std::time::Instant,
    every: Duration,
    next: std::time::Instant,
    state_dir: std::path::PathBuf,
    pub samples: Vec<Sample>,
}

impl Sampler {
    pub fn new(every: Duration, state_dir: &Path) -> Sampler {
        let now = std::time::Instant::now();
        Sampler {
            began: now,
            every,
            next: now,
            state_dir: state_dir.to_path_buf(),
            samples: Vec::new(),
        }
    }

    pub fn due(&self) -> bool {
        std::time::Instant::now() >= self.next
    }

    pub fn next_at(&self) -> std::time::Instant {
        self.next
    }

    pub fn take(&mut self, decisions: usize) -> Sample {
        // A late sample does not bring a burst of catch-up ones.
        self.next = (self.next + self.every).max(std::time::Instant::now());
        let sample = Sample {
            t_s: self.began.elapsed().as_secs_f64(),
            rss_mb: rss_mb(),
            state_mb: dir_mb(&self.state_dir),
            decisions,
        };
        self.samples.push(sample);
        sample
    }
}
