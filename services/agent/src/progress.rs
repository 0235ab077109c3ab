//! Training progress read from worker output: Megatron-LM's iteration
//! lines and plain `step N` / `iter N` / `epoch N`, plus the job's own
//! patterns (a named group `iteration`, optionally `ms`).

use std::time::Instant;

use regex::Regex;

/// Megatron-LM's `iteration N/ M | ... elapsed time per iteration (ms): X`.
const MEGATRON: &str = r"iteration\s+(?P<iteration>\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*(?P<ms>[0-9]+(?:\.[0-9]+)?)";
/// `step 12`, `iter: 12`, `epoch=3`, at a word boundary.
const PLAIN: &str = r"(?i)\b(?:step|iter|epoch)\b[\s:=#]*(?P<iteration>\d+)";

/// `compute_ms=12.5` (or `compute ms: 12.5`) on a progress line: the
/// rank's own compute in the step, apart from waiting in collectives.
const COMPUTE: &str = r"\bcompute[_ ]ms\s*[=:]?\s*(?P<ms>[0-9]+(?:\.[0-9]+)?)";

/// One iteration a worker reported finishing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub iteration: i64,
    /// Its time: from the line if it says, else the time since the
    /// worker's previous progress line (none for the first).
    pub time_ms: Option<f64>,
    /// The rank's own compute within it, if the line says.
    pub compute_ms: Option<f64>,
}

/// The patterns of one job, tried in order: the job's own first.
#[derive(Debug, Clone)]
pub struct ProgressPatterns {
    patterns: Vec<Regex>,
    compute: Regex,
}

impl ProgressPatterns {
    /// The built-in patterns after `extra` (validated with the settings).
    pub fn new(extra: &[String]) -> Result<ProgressPatterns, regex::Error> {
        let mut patterns = extra
            .iter()
            .map(|p| Regex::new(p))
            .collect::<Result<Vec<_>, _>>()?;
        patterns.push(Regex::new(MEGATRON).expect("built-in pattern"));
        patterns.push(Regex::new(PLAIN).expect("built-in pattern"));
        Ok(ProgressPatterns {
            patterns,
            compute: Regex::new(COMPUTE).expect("built-in pattern"),
        })
    }

    /// The compute time a progress line reports, if any.
    pub fn compute_ms(&self, line: &str) -> Option<f64> {
        let ms = self
            .compute
            .captures(line)?
            .name("ms")?
            .as_str()
            .parse::<f64>();
        ms.ok().filter(|ms| ms.is_finite())
    }

    /// The iteration `line` reports, if any, and its time if it says.
    pub fn parse(&self, line: &str) -> Option<(i64, Option<f64>)> {
        self.patterns.iter().find_map(|re| {
            let caps = re.captures(line)?;
            let iteration = caps.name("iteration")?.as_str().parse().ok()?;
            let ms = caps
                .name("ms")
                .and_then(|m| m.as_str().parse::<f64>().ok())
                .filter(|ms| ms.is_finite() && *ms >= 0.0);
            Some((iteration, ms))
        })
    }
}

/// One worker's progress: turns matching lines into [`Progress`].
#[derive(Debug)]
pub struct ProgressTracker {
    patterns: ProgressPatterns,
    last: Option<Instant>,
}

impl ProgressTracker {
    pub fn new(patterns: ProgressPatterns) -> ProgressTracker {
        ProgressTracker {
            patterns,
            last: None,
        }
    }

    pub fn line(&mut self, line: &str, now: Instant) -> Option<Progress> {
        let (iteration, ms) = self.patterns.parse(line)?;
        let since = self
            .last
            .map(|t| now.saturating_duration_since(t).as_secs_f64() * 1000.0);
        self.last = Some(now);
        Some(Progress {
            iteration,
            time_ms: ms.or(since),
            compute_ms: self.patterns.compute_ms(line),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_megatron_and_plain_lines() {
        let p = ProgressPatterns::new(&[]).unwrap();
        let megatron = " iteration       20/     200 | consumed samples:          160 | elapsed time per iteration (ms): 35.2 | learning rate: 1.000E-03 | lm loss: 4.1E+00 |";
        assert_eq!(p.parse(megatron), Some((20, Some(35.2))));
        assert_eq!(p.parse("Epoch 3 done"), Some((3, None)));
        assert_eq!(p.parse("step: 120 loss 2.1"), Some((120, None)));
        assert_eq!(p.parse("iter 7"), Some((7, None)));
        assert_eq!(p.parse("stepping into 5 things"), None);
        assert_eq!(p.parse("loss 2.0"), None);
        assert_eq!(p.compute_ms("step 12 loss 2.1 compute_ms=41.5"), Some(41.5));
        assert_eq!(p.compute_ms("step 12 compute ms: 7"), Some(7.0));
        assert_eq!(p.compute_ms("step 12 loss 2.1"), None);
    }

    #[test]
    fn a_jobs_own_pattern_comes_first() {
        let p =
            ProgressPatterns::new(&[r"done (?P<iteration>\d+) in (?P<ms>\d+)ms".into()]).unwrap();
        assert_eq!(p.parse("done 9 in 40ms"), Some((9, Some(40.0))));
    }
}
