//! Slurm's JSON for nodes and jobs, in both shapes unicron meets:
//! Slurm 22.05 (`state` a lower-case string plus `state_flags`, `job_state`
//! a string) and 23.02+ (`state` an upper-case array holding the flags,
//! `job_state` an array from 23.11). Fields are read leniently, by name:
//! the rest of each record changes between releases and is ignored.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::REASON_PREFIX;
use crate::hostlist;

/// One node as Slurm sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub name: String,
    /// Base state and flags, upper case: `IDLE`, `MIXED`, `DRAIN`, `DOWN`,
    /// `NOT_RESPONDING`...
    pub states: BTreeSet<String>,
    /// The drain or down reason; empty if none.
    pub reason: String,
}

impl NodeView {
    pub fn drained(&self) -> bool {
        self.states.contains("DRAIN")
    }

    /// Slurm holds it dead: DOWN, NOT_RESPONDING or FAIL.
    pub fn down(&self) -> bool {
        ["DOWN", "NOT_RESPONDING", "FAIL"]
            .iter()
            .any(|s| self.states.contains(*s))
    }

    /// Drained by unicron (its reason starts with `unicron:`).
    pub fn drained_by_unicron(&self) -> bool {
        self.drained() && self.reason.starts_with(REASON_PREFIX)
    }
}

/// One job as Slurm sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub id: u64,
    pub name: String,
    /// `RUNNING`, `PENDING`, `COMPLETED`...; the first if Slurm lists
    /// several.
    pub state: String,
    /// The allocation's nodes; empty while pending.
    pub nodes: Vec<String>,
}

/// The `nodes` of `scontrol show nodes --json` (23.02+) or of Slurm
/// 22.05's `sinfo --json`.
pub fn parse_nodes(text: &str) -> Result<Vec<NodeView>, String> {
    let doc = document(text)?;
    let nodes = doc
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or("no `nodes` array")?;
    nodes.iter().map(node).collect()
}

/// The `jobs` of `squeue --json`.
pub fn parse_jobs(text: &str) -> Result<Vec<JobView>, String> {
    let doc = document(text)?;
    let jobs = doc
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or("no `jobs` array")?;
    jobs.iter().map(job).collect()
}

/// The parsed document, or Slurm's own errors if it reported any.
fn document(text: &str) -> Result<Value, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let errors: Vec<String> = doc
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            e.get("description")
                .or_else(|| e.get("error"))
                .and_then(Value::as_str)
                .map_or_else(|| e.to_string(), str::to_string)
        })
        .collect();
    if errors.is_empty() {
        Ok(doc)
    } else {
        Err(format!("Slurm reports: {}", errors.join("; ")))
    }
}

fn node(v: &Value) -> Result<NodeView, String> {
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .ok_or("a node without `name`")?
        .to_string();
    let mut states = words(v.get("state"));
    states.extend(words(v.get("state_flags")));
    if states.is_empty() {
        return Err(format!("node {name}: no `state`"));
    }
    // A string in 22.05 and scontrol's 23.02+ output; an object with a
    // description in sinfo's 23.02+ output.
    let reason = match v.get("reason") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    };
    Ok(NodeView {
        name,
        states,
        reason,
    })
}

fn job(v: &Value) -> Result<JobView, String> {
    let id = match v.get("job_id") {
        Some(Value::Number(n)) => n.as_u64(),
        // 23.02+ wraps some numbers as {"set", "infinite", "number"}.
        Some(Value::Object(o)) => o.get("number").and_then(Value::as_u64),
        _ => None,
    }
    .ok_or("a job without `job_id`")?;
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    // A string to 23.02, an array (base state first) from 23.11.
    let state = match v.get("job_state") {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Array(a)) => a.first().and_then(Value::as_str),
        _ => None,
    }
    .ok_or(format!("job {id}: no `job_state`"))?
    .to_uppercase();
    let nodes = v.get("nodes").and_then(Value::as_str).unwrap_or_default();
    let nodes = hostlist::expand(nodes).map_err(|e| format!("job {id}: {e}"))?;
    Ok(JobView {
        id,
        name,
        state,
        nodes,
    })
}

/// A string or an array of strings, as upper-case words.
fn words(v: Option<&Value>) -> BTreeSet<String> {
    match v {
        Some(Value::String(s)) if !s.is_empty() => [s.to_uppercase()].into(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_uppercase)
            .collect(),
        _ => BTreeSet::new(),
    }
}
