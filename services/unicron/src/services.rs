//! Running the services of the other crates from the binary: `unicron
//! planner` and `unicron detector` for deployments, and the helpers `unicron up` uses.

use anyhow::{Context, bail};
use unicron_core::signing::CommandSigner;

use crate::config::Config;

/// `unicron planner`: the planner against an existing Kafka, until Ctrl-C.
pub async fn planner(config: &Config) -> anyhow::Result<()> {
    let Some(brokers) = config.kafka.brokers.clone() else {
        bail!(
            "kafka.brokers: required for `unicron planner` (use `unicron up` for the embedded broker)"
        );
    };
    let signer = config.planner.signer()?;
    println!(
        "planner: group {} on {brokers}, key {}",
        config.planner.group_id, config.planner.key_id
    );
    unicron_planner::run(&config.kafka, &brokers, &config.planner, signer, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .context("planner")
}

/// `unicron detector`: the detector against an existing Kafka, until Ctrl-C.
pub async fn detector(config: &Config) -> anyhow::Result<()> {
    let Some(brokers) = config.kafka.brokers.clone() else {
        bail!(
            "kafka.brokers: required for `unicron detector` (use `unicron up` for the embedded broker)"
        );
    };
    println!(
        "detector: group {} on {brokers}, {} external input(s)",
        config.detector.group_id,
        config.detector.inputs.len()
    );
    unicron_detector::run(&config.kafka, &brokers, &config.detector, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .context("detector")
}

/// The configured signer, or a fresh development key when none is
/// configured (embedded mode only; the caller says so on its output).
pub fn signer_or_dev_key(config: &Config) -> anyhow::Result<(CommandSigner, bool)> {
    if config.planner.signing_key_file.is_some() {
        return Ok((config.planner.signer()?, false));
    }
    let mut seed = [0u8; 32];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed))
        .context("reading /dev/urandom for a development signing key")?;
    Ok((CommandSigner::from_seed("dev", seed), true))
}
