//! Failures that really happened: a public fault trace of a GPU cluster,
//! mapped onto the simulated cluster's nodes for `unicron evaluate` and
//! `unicron up --trace`.
//!
//! The trace shipped is StepFun's InfiniteHBD trace (tools/traces/infinitehbd,
//! Apache-2.0): 584 node faults on 400 servers of an LLM-pretraining cluster
//! over 348 days, each with its repair. Which of the trace's anonymous
//! servers is which simulated node is not in the trace, so it is drawn from
//! the seed, as are the jobs.

pub mod categories;
mod infinitehbd;
pub mod stats;

use std::path::Path;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use unicron_core::FailureKind;

pub use categories::{FoundBy, Reading};

use crate::faults::{TraceEntry, TraceError};

/// The InfiniteHBD trace, built in so an evaluation runs from anywhere.
const INFINITEHBD_JSON: &str =
    include_str!("../../../../tools/traces/infinitehbd/fault_trace.json");

/// One fault of a real trace.
#[derive(Debug, Clone, PartialEq)]
pub struct RealFault {
    /// The trace's (anonymous) server id.
    pub server: String,
    /// Seconds after the trace's time 0.
    pub start_s: f64,
    /// When the server was back, repaired.
    pub end_s: f64,
    pub level: String,
    pub class: String,
    pub desc: String,
}

impl RealFault {
    pub fn repair_s(&self) -> f64 {
        self.end_s - self.start_s
    }

    /// Who finds it first ([`categories::INFINITEHBD`]); a category the
    /// table does not know is taken for a job's unexplained exit.
    pub fn found_by(&self) -> FoundBy {
        categories::found_by(&self.class, &self.desc)
            .unwrap_or(FoundBy::Job(FailureKind::ExitedAbnormally))
    }

    /// The name the evaluation's tables group it under: its class, with
    /// its level where the class alone says nothing.
    pub fn category(&self) -> String {
        if self.class == "Other Failures" {
            let level = self.level.split(' ').next().unwrap_or_default();
            format!("Other Failures ({level})")
        } else {
            self.class.clone()
        }
    }
}

/// How a trace's servers land on a cluster of another size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Copies of the trace, one per group of `servers` nodes, each with
    /// its own draw of servers to nodes and shifted in time by its share of
    /// the span (wrapping round): every node keeps the trace's per-server
    /// failure process. A last, smaller group keeps only the servers that
    /// land on its nodes.
    Tile,
    /// Every server onto the cluster's nodes, several to a node when it is
    /// smaller: all the trace's faults, each node failing as often as the
    /// servers folded onto it. For demonstrations on a few nodes.
    Fold,
}

/// A whole real trace.
#[derive(Debug, Clone, PartialEq)]
pub struct RealTrace {
    /// Servers of the cluster the trace covers, failed or not.
    pub servers: usize,
    /// Seconds the trace covers, from its time 0.
    pub span_s: f64,
    pub faults: Vec<RealFault>,
}

impl RealTrace {
    /// StepFun's InfiniteHBD trace: 400 servers, 348 days from 2024-03-30.
    /// Parsed once per process: every scenario list and seed asks for it.
    pub fn infinitehbd() -> RealTrace {
        static PARSED: std::sync::OnceLock<RealTrace> = std::sync::OnceLock::new();
        PARSED
            .get_or_init(|| {
                let faults = infinitehbd::parse(INFINITEHBD_JSON, "tools/traces/infinitehbd")
                    .expect("the built-in trace parses (a test reads it)");
                RealTrace::new(400, 349.0 * 86_400.0, faults)
            })
            .clone()
    }

    /// A trace in the InfiniteHBD format from a file, for a cluster of
    /// `servers` servers (at least the ids it names).
    pub fn read_infinitehbd(path: &Path, servers: usize) -> Result<RealTrace, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let faults = infinitehbd::parse(&text, &path.display().to_string())?;
        let span_s = faults.iter().map(|f| f.end_s).fold(0.0, f64::max);
        Ok(RealTrace::new(servers, span_s, faults))
    }

    fn new(servers: usize, span_s: f64, faults: Vec<RealFault>) -> RealTrace {
        let named = server_ids(&faults).len();
        RealTrace {
            servers: servers.max(named),
            span_s,
            faults,
        }
    }

    /// The trace as failures on `nodes`, by time: each fault that hits a
    /// job in `reading`, on the node its server lands on (drawn from
    /// `seed`), with the trace's repair and category.
    pub fn entries(
        &self,
        nodes: &[String],
        seed: u64,
        reading: Reading,
        fit: Fit,
    ) -> Vec<TraceEntry> {
        let ids = server_ids(&self.faults);
        let copies = match fit {
            Fit::Tile => nodes.len().div_ceil(self.servers).max(1),
            Fit::Fold => 1,
        };
        let mut out = Vec::new();
        for copy in 0..copies {
            // Which node each server is, in this copy.
            let mut rng =
                rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5e_7f_a0 ^ ((copy as u64) << 32));
            let mut slots: Vec<usize> = (0..self.servers).collect();
            slots.shuffle(&mut rng);
            let shift = self.span_s * copy as f64 / copies as f64;
            for fault in &self.faults {
                let Some(kind) = reading.hits_as(fault.found_by()) else {
                    continue;
                };
                let slot = slots[ids.binary_search(&fault.server.as_str()).expect("named")];
                let position = match fit {
                    Fit::Tile => copy * self.servers + slot,
                    Fit::Fold => slot % nodes.len().max(1),
                };
                let Some(node) = nodes.get(position) else {
                    continue;
                };
                out.push(TraceEntry {
                    at_s: ((fault.start_s + shift) % self.span_s * 1000.0).round() / 1000.0,
                    node: node.clone(),
                    kind,
                    repair_s: Some((fault.repair_s() * 1000.0).round() / 1000.0),
                    category: Some(fault.category()),
                });
            }
        }
        out.sort_by(|a, b| a.at_s.total_cmp(&b.at_s).then_with(|| a.node.cmp(&b.node)));
        out
    }

    /// The faults that start within `[from_s, from_s + length_s)`, moved
    /// to start at 0: a day of the trace for a demonstration.
    pub fn window(&self, from_s: f64, length_s: f64) -> RealTrace {
        let faults = self
            .faults
            .iter()
            .filter(|f| f.start_s >= from_s && f.start_s < from_s + length_s)
            .map(|f| RealFault {
                start_s: f.start_s - from_s,
                end_s: f.end_s - from_s,
                ..f.clone()
            })
            .collect();
        RealTrace {
            servers: self.servers,
            span_s: length_s,
            faults,
        }
    }

    /// The day (counted from 0) on which the most faults that hit a job
    /// in `reading` start.
    pub fn busiest_day(&self, reading: Reading) -> u32 {
        let mut per_day = std::collections::BTreeMap::new();
        for f in self
            .faults
            .iter()
            .filter(|f| reading.hits_as(f.found_by()).is_some())
        {
            *per_day
                .entry((f.start_s / 86_400.0) as u32)
                .or_insert(0_u32) += 1;
        }
        // The earliest of the busiest.
        per_day
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map_or(0, |(day, _)| *day)
    }
}

/// The server ids a trace names, sorted (their positions index the draw).
fn server_ids(faults: &[RealFault]) -> Vec<&str> {
    let mut ids: Vec<&str> = faults.iter().map(|f| f.server.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests;
