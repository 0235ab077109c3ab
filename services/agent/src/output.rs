//! A worker's stdout or stderr: every line passed through to the agent's
//! own output (whole lines, so ranks never interleave mid-line), published
//! as a log record within the rate and length caps, and read for progress.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use unicron_core::AgentEventKind;

use crate::metrics::{LINES_CAPPED, LINES_TRUNCATED};
use crate::progress::ProgressTracker;
use crate::report::{Reported, Reporter};

/// Which of the agent's own streams a worker stream passes through to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Who a stream belongs to and how much of it may be published.
pub struct LineContext {
    pub reporter: Arc<Reporter>,
    pub job: String,
    pub rank: i32,
    pub generation: i64,
    pub max_line_bytes: usize,
    pub max_lines_per_s: u32,
    pub progress: ProgressTracker,
    /// Called at the worker's first progress line (shared by its streams).
    pub first_step: FirstStep,
}

/// A callback run once, at a worker's first training step.
pub type FirstStep = Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A token bucket of lines per second, burst one second's worth.
struct RateCap {
    per_s: f64,
    tokens: f64,
    at: Instant,
}

impl RateCap {
    fn new(per_s: u32) -> RateCap {
        RateCap {
            per_s: f64::from(per_s),
            tokens: f64::from(per_s),
            at: Instant::now(),
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + elapsed * self.per_s).min(self.per_s);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// `line` cut to at most `max` bytes at a character boundary.
fn cut(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// Reads `stream` to its end.
pub async fn follow(stream: impl AsyncRead + Unpin, which: Stream, mut ctx: LineContext) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::with_capacity(256);
    let mut cap = RateCap::new(ctx.max_lines_per_s);
    let mut dropped: u64 = 0;
    let source = which.name();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        // Pass-through first: log shipping that reads the agent's output
        // sees every line, capped or not. The newline goes with the line.
        buf.push(b'\n');
        let _ = match which {
            Stream::Stdout => std::io::stdout().lock().write_all(&buf),
            Stream::Stderr => std::io::stderr().lock().write_all(&buf),
        };
        buf.pop();
        let line = String::from_utf8_lossy(&buf);
        let now = Instant::now();
        if let Some(progress) = ctx.progress.line(&line, now) {
            let mut event = ctx.reporter.event(
                AgentEventKind::IterationDone,
                Some(&ctx.job),
                Some(ctx.rank),
            );
            event.iteration = Some(progress.iteration);
            event.iteration_time_ms = progress.time_ms;
            event.compute_ms = progress.compute_ms;
            ctx.reporter.send(Reported::Agent(event));
            let first = ctx.first_step.lock().ok().and_then(|mut f| f.take());
            if let Some(first) = first {
                first();
            }
        }
        if !cap.take(now) {
            dropped += 1;
            ::metrics::counter!(LINES_CAPPED.name).increment(1);
            continue;
        }
        let mut attributes =
            BTreeMap::from([("generation".to_string(), ctx.generation.to_string())]);
        if dropped > 0 {
            attributes.insert("lines_dropped_before".into(), dropped.to_string());
            dropped = 0;
        }
        let kept = cut(&line, ctx.max_line_bytes);
        if kept.len() < line.len() {
            attributes.insert("truncated_from_bytes".into(), line.len().to_string());
            ::metrics::counter!(LINES_TRUNCATED.name).increment(1);
        }
        ctx.reporter.log(
            source,
            Some(&ctx.job),
            Some(ctx.rank),
            kept.to_string(),
            attributes,
        );
    }
    if dropped > 0 {
        ctx.reporter.log(
            "agent",
            Some(&ctx.job),
            Some(ctx.rank),
            format!("unicron-agent: {dropped} more {source} lines of rank {} over the rate cap were not published", ctx.rank),
            BTreeMap::from([("lines_dropped".to_string(), dropped.to_string())]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_at_a_character_boundary() {
        assert_eq!(cut("abc", 10), "abc");
        assert_eq!(cut("aé", 2), "a");
    }

    #[test]
    fn the_cap_allows_a_seconds_burst_then_refills() {
        let mut cap = RateCap::new(3);
        let t = cap.at;
        assert!((0..3).all(|_| cap.take(t)));
        assert!(!cap.take(t));
        assert!(cap.take(t + std::time::Duration::from_millis(400)));
    }
}
