//! What an executor decides before it acts, with no I/O: whether a command
//! may act at all ([`Gate`]), what its backend is sent and answers (the
//! HTTP contract of `docs/executor.md`), how long to wait between retries
//! ([`Backoff`]), and the result record it publishes.
//!
//! Expiry is by event time, like every other rule here: the gate keeps a
//! watermark (the newest `time_ms` of a verified command for its cluster),
//! and a command older than the watermark minus the TTL is expired. A
//! replayed old command therefore cannot act, and the rule holds at any
//! simulation speed.

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use crate::records::{Command, CommandAction, CommandResult, CommandStatus};
use crate::signing::{self, SignatureError};

/// Why a command is refused without acting. The text is the result's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("unsigned: the command carries no signature")]
    Unsigned,
    #[error("forged: {0}")]
    Forged(SignatureError),
    #[error("foreign: the command is for cluster `{command}`, this executor serves `{serves}`")]
    Foreign { command: String, serves: String },
    #[error(
        "expired: issued at {time_ms} ms, {age_ms} ms before the newest command (ttl {ttl_ms} ms)"
    )]
    Expired {
        time_ms: i64,
        age_ms: i64,
        ttl_ms: i64,
    },
    #[error("unknown action: this executor does not know how to carry it out")]
    UnknownAction,
}

impl Rejection {
    /// Short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Rejection::Unsigned => "unsigned",
            Rejection::Forged(_) => "forged",
            Rejection::Foreign { .. } => "foreign",
            Rejection::Expired { .. } => "expired",
            Rejection::UnknownAction => "unknown_action",
        }
    }
}

/// How a carrier takes part in one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Act and publish results (the command names this carrier's node, or
    /// the carrier serves the whole cluster).
    Answer,
    /// Act, publish nothing: e.g. an agent whose node a re-plan took out of
    /// its job stops the job's workers, but the command is not for it.
    Silent,
    /// Nothing to do with this carrier: skipped before the gate.
    Skip,
}

/// The checks every command passes before an executor acts on it.
#[derive(Debug, Clone)]
pub struct Gate {
    cluster: String,
    keys: BTreeMap<String, VerifyingKey>,
    ttl_ms: i64,
    watermark_ms: i64,
}

impl Gate {
    /// A gate for `cluster`, trusting `keys` (key id → public key), that
    /// expires commands `ttl_ms` older than the newest one it verified.
    pub fn new(
        cluster: impl Into<String>,
        keys: BTreeMap<String, VerifyingKey>,
        ttl_ms: i64,
    ) -> Gate {
        Gate {
            cluster: cluster.into(),
            keys,
            ttl_ms,
            watermark_ms: i64::MIN,
        }
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The newest verified command time, `i64::MIN` before the first.
    pub fn watermark_ms(&self) -> i64 {
        self.watermark_ms
    }

    /// Restores the watermark kept in the executor's store.
    pub fn restore_watermark(&mut self, watermark_ms: i64) {
        self.watermark_ms = self.watermark_ms.max(watermark_ms);
    }

    /// Checks signature, cluster, age and action, in that order, so a forged
    /// command never moves the watermark. Only a command that passes the
    /// signature and cluster checks advances it.
    pub fn check(&mut self, command: &Command) -> Result<(), Rejection> {
        if command.signature.is_empty() {
            return Err(Rejection::Unsigned);
        }
        signing::verify(command, |id| self.keys.get(id).copied()).map_err(Rejection::Forged)?;
        if command.cluster != self.cluster {
            return Err(Rejection::Foreign {
                command: command.cluster.clone(),
                serves: self.cluster.clone(),
            });
        }
        self.watermark_ms = self.watermark_ms.max(command.time_ms);
        let age_ms = self.watermark_ms.saturating_sub(command.time_ms);
        if age_ms > self.ttl_ms {
            return Err(Rejection::Expired {
                time_ms: command.time_ms,
                age_ms,
                ttl_ms: self.ttl_ms,
            });
        }
        if command.action == CommandAction::Unknown {
            return Err(Rejection::UnknownAction);
        }
        Ok(())
    }
}

/// Body of `POST <backend url>`: the command, flattened for non-Avro
/// clients. `command_id` is the idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRequest {
    pub command_id: String,
    pub cluster: String,
    pub decision_id: String,
    /// Event time the command was issued at, ms since the epoch.
    pub time_ms: i64,
    pub action: CommandAction,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub nodes: Vec<String>,
    #[serde(default)]
    pub restore_from: Option<String>,
    #[serde(default)]
    pub causation: Vec<String>,
    /// 1 for the first delivery, 2 for the first retry, ...
    pub attempt: u32,
}

impl ActionRequest {
    pub fn new(command: &Command, attempt: u32) -> ActionRequest {
        ActionRequest {
            command_id: command.id.clone(),
            cluster: command.cluster.clone(),
            decision_id: command.decision_id.clone(),
            time_ms: command.time_ms,
            action: command.action,
            job: command.job.clone(),
            nodes: command.nodes.clone(),
            restore_from: command.restore_from.clone(),
            causation: command.causation.clone(),
            attempt,
        }
    }
}

/// What a backend did: it succeeded or failed (a final answer; transient
/// trouble is an HTTP 5xx or a timeout, which the executor retries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Succeeded,
    Failed,
}

/// Body of a backend's 200 answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionResponse {
    pub status: Outcome,
    #[serde(default)]
    pub reason: Option<String>,
    /// How long the action took (or will take), ms. If absent the
    /// executor reports the time it waited for the answer.
    #[serde(default)]
    pub duration_ms: Option<i64>,
    /// Event time the action completed, ms since the epoch. If absent the
    /// result is stamped `command.time_ms + duration_ms`.
    #[serde(default)]
    pub completed_ms: Option<i64>,
}

/// Exponential backoff between attempts at a transient backend error.
/// No jitter: one executor per cluster, so there is no herd to spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Backoff {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub initial_ms: u64,
    pub max_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            max_attempts: 5,
            initial_ms: 200,
            max_ms: 5_000,
        }
    }
}

impl Backoff {
    /// The wait after failed attempt `attempt` (1-based), or `None` when no
    /// attempt is left.
    pub fn delay_ms(&self, attempt: u32) -> Option<u64> {
        if attempt >= self.max_attempts {
            return None;
        }
        let factor = 1u64
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u64::MAX);
        Some(self.initial_ms.saturating_mul(factor).min(self.max_ms))
    }
}

/// The result record for `command`. Its event time is the command's plus
/// the duration unless the backend said when it completed.
pub fn result(
    command: &Command,
    status: CommandStatus,
    reason: Option<String>,
    duration_ms: i64,
    completed_ms: Option<i64>,
    executor: &str,
) -> CommandResult {
    CommandResult {
        command_id: command.id.clone(),
        cluster: command.cluster.clone(),
        time_ms: completed_ms.unwrap_or(command.time_ms.saturating_add(duration_ms.max(0))),
        status,
        reason,
        duration_ms: duration_ms.max(0),
        executor: executor.to_string(),
        node: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::CommandSigner;

    fn signed(cluster: &str, time_ms: i64, action: CommandAction) -> Command {
        let mut command = Command {
            id: format!("c:{cluster}:{time_ms}"),
            cluster: cluster.into(),
            decision_id: "d".into(),
            time_ms,
            action,
            job: Some("j".into()),
            nodes: vec![],
            restore_from: None,
            causation: vec![],
            key_id: String::new(),
            signature: vec![],
            rendezvous: None,
            snapshots: None,
        };
        CommandSigner::from_seed("k1", [3; 32]).sign(&mut command);
        command
    }

    fn gate() -> Gate {
        let key = CommandSigner::from_seed("k1", [3; 32]).verifying_key();
        Gate::new("a", BTreeMap::from([("k1".to_string(), key)]), 60_000)
    }

    #[test]
    fn a_valid_command_passes_and_moves_the_watermark() {
        let mut gate = gate();
        assert_eq!(
            gate.check(&signed("a", 1_000, CommandAction::Restart)),
            Ok(())
        );
        assert_eq!(gate.watermark_ms(), 1_000);
    }

    #[test]
    fn unsigned_forged_foreign_expired_and_unknown_are_rejected() {
        let mut gate = gate();
        let mut unsigned = signed("a", 1_000, CommandAction::Restart);
        unsigned.signature.clear();
        assert_eq!(gate.check(&unsigned), Err(Rejection::Unsigned));

        let mut tampered = signed("a", 1_000, CommandAction::Restart);
        tampered.nodes.push("n9".into());
        assert_eq!(
            gate.check(&tampered),
            Err(Rejection::Forged(SignatureError::Mismatch))
        );
        let mut other_key = signed("a", 1_000, CommandAction::Restart);
        CommandSigner::from_seed("k2", [4; 32]).sign(&mut other_key);
        assert!(matches!(
            gate.check(&other_key),
            Err(Rejection::Forged(SignatureError::UnknownKey(_)))
        ));

        let foreign = gate
            .check(&signed("b", 1_000, CommandAction::Restart))
            .unwrap_err();
        assert_eq!(foreign.label(), "foreign");
        assert!(foreign.to_string().contains("`b`"), "{foreign}");

        assert_eq!(
            gate.check(&signed("a", 100_000, CommandAction::Restart)),
            Ok(())
        );
        let expired = gate
            .check(&signed("a", 30_000, CommandAction::Restart))
            .unwrap_err();
        assert_eq!(
            expired,
            Rejection::Expired {
                time_ms: 30_000,
                age_ms: 70_000,
                ttl_ms: 60_000
            }
        );
        assert_eq!(
            gate.check(&signed("a", 41_000, CommandAction::Restart)),
            Ok(())
        );
        assert_eq!(
            gate.check(&signed("a", 100_000, CommandAction::Unknown)),
            Err(Rejection::UnknownAction)
        );
    }

    #[test]
    fn a_key_rotation_accepts_both_keys_then_only_the_new_one() {
        let old = CommandSigner::from_seed("k1", [3; 32]);
        let new = CommandSigner::from_seed("k2", [4; 32]);
        let trusting = |signers: &[&CommandSigner]| {
            let keys = signers
                .iter()
                .map(|s| (s.key_id.clone(), s.verifying_key()))
                .collect();
            Gate::new("a", keys, 60_000)
        };
        let by = |signer: &CommandSigner, time_ms: i64| {
            let mut command = signed("a", time_ms, CommandAction::Restart);
            command.id = format!("c:{}:{time_ms}", signer.key_id);
            signer.sign(&mut command);
            command
        };
        // During the rotation executors trust both; planners switch keys.
        let mut both = trusting(&[&old, &new]);
        assert_eq!(both.check(&by(&old, 1_000)), Ok(()));
        assert_eq!(both.check(&by(&new, 2_000)), Ok(()));
        // After it, a command signed with the retired key is refused.
        let mut rotated = trusting(&[&new]);
        assert_eq!(rotated.check(&by(&new, 3_000)), Ok(()));
        assert_eq!(
            rotated.check(&by(&old, 3_000)),
            Err(Rejection::Forged(SignatureError::UnknownKey("k1".into())))
        );
    }

    #[test]
    fn forged_commands_do_not_move_the_watermark() {
        let mut gate = gate();
        let mut forged = signed("a", 9_000_000, CommandAction::Restart);
        forged.time_ms += 1;
        assert!(gate.check(&forged).is_err());
        assert_eq!(gate.watermark_ms(), i64::MIN);
        assert!(
            gate.check(&signed("b", 9_000_000, CommandAction::Restart))
                .is_err()
        );
        assert_eq!(gate.watermark_ms(), i64::MIN);
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_stops() {
        let backoff = Backoff {
            max_attempts: 5,
            initial_ms: 100,
            max_ms: 500,
        };
        let delays: Vec<_> = (1..=5).map(|a| backoff.delay_ms(a)).collect();
        assert_eq!(delays, [Some(100), Some(200), Some(400), Some(500), None]);
    }

    #[test]
    fn results_are_stamped_in_event_time() {
        let command = signed("a", 1_000, CommandAction::Restart);
        let done = result(&command, CommandStatus::Succeeded, None, 250, None, "e");
        assert_eq!((done.time_ms, done.duration_ms), (1_250, 250));
        let told = result(
            &command,
            CommandStatus::Failed,
            Some("x".into()),
            5,
            Some(9_000),
            "e",
        );
        assert_eq!(told.time_ms, 9_000);
    }

    #[test]
    fn the_request_round_trips_as_json() {
        let request = ActionRequest::new(&signed("a", 1, CommandAction::Reconfigure), 2);
        let text = serde_json::to_string(&request).unwrap();
        assert!(text.contains("\"action\":\"reconfigure\""), "{text}");
        assert_eq!(
            serde_json::from_str::<ActionRequest>(&text).unwrap(),
            request
        );
        let answer: ActionResponse =
            serde_json::from_str(r#"{"status":"failed","reason":"no such job"}"#).unwrap();
        assert_eq!(answer.status, Outcome::Failed);
        assert_eq!(answer.duration_ms, None);
    }
}
