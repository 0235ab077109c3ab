use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use unicron_core::planner::PlannerConfig;
use unicron_core::signing::CommandSigner;

use crate::error::PlannerError;

/// The `[planner]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerSettings {
    /// RocksDB directory: state, consumed offsets, outbox.
    pub state_dir: PathBuf,
    /// Consumer group shared by planner instances.
    pub group_id: String,
    /// Id executors know the signing key by.
    pub key_id: String,
    /// File holding the Ed25519 signing key's 32-byte seed as 64 hex digits.
    /// Required for `unicron planner`; `unicron up` makes a dev key if unset.
    pub signing_key_file: Option<PathBuf>,
    /// fsync every commit (survives power loss, not only kill -9).
    pub sync_writes: bool,
    /// Checkpoint an input partition after this many decisions on it: a
    /// planner taking the partition over replays at most about this many
    /// decisions (docs/operations.md, "Several planners").
    pub checkpoint_every_decisions: u64,
    /// Write a whole checkpoint of every held partition at least this often
    /// (seconds), even when idle, so the newest outlives the checkpoint
    /// topic's retention (3 days by default).
    pub checkpoint_full_every_s: f64,
    /// The decision model: policy, D_running, D_transition, escalation.
    pub tuning: PlannerConfig,
}

impl Default for PlannerSettings {
    fn default() -> Self {
        PlannerSettings {
            state_dir: PathBuf::from("unicron-state/planner"),
            group_id: "unicron-planner".to_string(),
            key_id: "dev".to_string(),
            signing_key_file: None,
            sync_writes: false,
            checkpoint_every_decisions: 1000,
            checkpoint_full_every_s: 86_400.0,
            tuning: PlannerConfig::default(),
        }
    }
}

impl PlannerSettings {
    /// Rejects settings the planner cannot run with, naming the field.
    pub fn validate(&self) -> Result<(), PlannerError> {
        if self.checkpoint_every_decisions == 0 {
            return Err(PlannerError::Config(
                "planner.checkpoint_every_decisions: must be at least 1".into(),
            ));
        }
        if !(self.checkpoint_full_every_s > 0.0 && self.checkpoint_full_every_s < 1e9) {
            return Err(PlannerError::Config(format!(
                "planner.checkpoint_full_every_s: must be a positive number of seconds, not {}",
                self.checkpoint_full_every_s
            )));
        }
        Ok(())
    }

    /// The signer from `signing_key_file`.
    pub fn signer(&self) -> Result<CommandSigner, PlannerError> {
        let path = self.signing_key_file.as_ref().ok_or_else(|| {
            PlannerError::Config(
                "planner.signing_key_file: required (32-byte seed as 64 hex digits)".into(),
            )
        })?;
        let text = std::fs::read_to_string(path).map_err(|e| {
            PlannerError::Config(format!("planner.signing_key_file: {}: {e}", path.display()))
        })?;
        let seed: [u8; 32] = hex::decode(text.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                PlannerError::Config(format!(
                    "planner.signing_key_file: {}: not 64 hex digits",
                    path.display()
                ))
            })?;
        Ok(CommandSigner::from_seed(self.key_id.clone(), seed))
    }
}
