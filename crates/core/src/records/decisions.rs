//! Planner decisions (`unicron.decisions`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The input record that caused a [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    pub kind: String,
    pub ref_id: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// One allocation the planner weighed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    pub allocation: BTreeMap<String, i32>,
    pub waf: f64,
    pub objective: f64,
}

/// One planner decision (`unicron.decisions`, key: cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub id: String,
    pub cluster: String,
    pub time_ms: i64,
    pub trigger: Trigger,
    pub inputs_digest: String,
    pub policy: String,
    pub policy_version: String,
    pub alternatives: Vec<Alternative>,
    #[serde(default)]
    pub chosen_index: Option<i32>,
    #[serde(default)]
    pub assignment: BTreeMap<String, Vec<String>>,
    pub reason: String,
    #[serde(default)]
    pub command_ids: Vec<String>,
}
