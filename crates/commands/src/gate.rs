//! The gate a carrier checks commands with, from its settings.

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;
use unicron_core::executor::Gate;

/// A setting that makes no sense, in one line that names it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingError(pub String);

/// The gate of `cluster` trusting `public_keys` (key id → hex), commands
/// expiring after `command_ttl_s`: what the executor and each agent check
/// commands with. Errors name the field under `section` (`executor`,
/// `agent`).
pub fn gate(
    section: &str,
    cluster: &str,
    public_keys: &BTreeMap<String, String>,
    command_ttl_s: f64,
) -> Result<Gate, SettingError> {
    let mut keys = BTreeMap::new();
    for (id, text) in public_keys {
        keys.insert(
            id.clone(),
            parse_key(text)
                .map_err(|e| SettingError(format!("{section}.public_keys.{id}: {e}")))?,
        );
    }
    seconds(&format!("{section}.command_ttl_s"), command_ttl_s)?;
    let ttl_ms = (command_ttl_s * 1000.0).round() as i64;
    Ok(Gate::new(cluster.to_string(), keys, ttl_ms))
}

fn parse_key(text: &str) -> Result<VerifyingKey, &'static str> {
    let bytes: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("not 64 hex digits")?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| "not an Ed25519 public key")
}

/// Positive and finite, and small enough to be a `Duration`.
pub fn seconds(field: &str, value: f64) -> Result<(), SettingError> {
    if value.is_finite() && value > 0.0 && value < 1e12 {
        Ok(())
    } else {
        Err(SettingError(format!(
            "{field}: must be a positive number of seconds, not {value}"
        )))
    }
}
