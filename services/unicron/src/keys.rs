//! `unicron keys`: make and inspect planner signing keys. A key file holds
//! the 32-byte Ed25519 seed as 64 hex digits (`planner.signing_key_file`);
//! executors trust its public key (`executor.public_keys`).

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use unicron_planner::PlannerSettings;

use crate::usage::UsageError;

/// Writes a new seed to `out` (mode 0600, never over an existing file) and
/// prints its public key.
pub fn generate(out: &Path) -> anyhow::Result<()> {
    let seed = crate::services::random_seed()?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(out).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::Error::new(UsageError(format!(
                "--out: {} exists; a key is never overwritten",
                out.display()
            )))
        } else {
            anyhow::Error::new(e).context(format!("writing {}", out.display()))
        }
    })?;
    writeln!(file, "{}", hex::encode(seed))
        .with_context(|| format!("writing {}", out.display()))?;
    public(out)
}

/// Prints the public key of the seed in `key`.
pub fn public(key: &Path) -> anyhow::Result<()> {
    let settings = PlannerSettings {
        signing_key_file: Some(key.to_path_buf()),
        ..PlannerSettings::default()
    };
    let signer = settings
        .signer()
        .map_err(|e| UsageError(e.to_string().replace("planner.signing_key_file", "--key")))?;
    println!(
        "public key: {}",
        hex::encode(signer.verifying_key().to_bytes())
    );
    Ok(())
}
