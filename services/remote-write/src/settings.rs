use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use unicron_access::TokenConfig;
use unicron_codec::formats::LabelMap;

use crate::error::RemoteWriteError;

/// The `[remote_write]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteWriteSettings {
    /// Where `POST /api/v1/write` listens; `--listen` overrides it.
    pub listen: SocketAddr,
    /// Which labels name cluster, node, GPU, job and rank: the detector's
    /// mapping for external inputs (dcgm-exporter's `Hostname` and `gpu`).
    pub labels: LabelMap,
    /// Largest request body accepted (snappy-compressed), in bytes; a
    /// larger one is answered 413.
    pub max_body_bytes: usize,
    /// Largest body once decompressed, in bytes; a larger one is answered
    /// 400 and dead-lettered, before any memory is spent on it.
    pub max_decoded_bytes: usize,
    /// How long a request waits for Kafka to acknowledge its records
    /// before it is answered 503 (Prometheus then sends it again). Below
    /// Prometheus' `remote_timeout` (30 s by default), so the answer is ours.
    pub send_timeout_s: f64,
    /// Who may post (`[[remote_write.tokens]]`): a token bound to one
    /// cluster makes every series it sends that cluster's (series without
    /// a cluster label get it; a series naming another is refused with the
    /// whole request, 403). Required unless `listen` is a loopback address.
    pub tokens: Vec<TokenConfig>,
}

impl Default for RemoteWriteSettings {
    fn default() -> Self {
        RemoteWriteSettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 9201)),
            labels: LabelMap::default(),
            max_body_bytes: 16 << 20,
            max_decoded_bytes: 64 << 20,
            send_timeout_s: 25.0,
            tokens: Vec::new(),
        }
    }
}

impl RemoteWriteSettings {
    /// The first setting that makes no sense, naming its field.
    pub fn validate(&self) -> Result<(), RemoteWriteError> {
        let bad = |field, reason: String| Err(RemoteWriteError::Setting { field, reason });
        if self.max_body_bytes == 0 {
            return bad("remote_write.max_body_bytes", "must be positive".into());
        }
        if self.max_decoded_bytes == 0 {
            return bad("remote_write.max_decoded_bytes", "must be positive".into());
        }
        if !(self.send_timeout_s.is_finite() && (0.1..=300.0).contains(&self.send_timeout_s)) {
            return bad(
                "remote_write.send_timeout_s",
                format!("{} is not between 0.1 and 300 seconds", self.send_timeout_s),
            );
        }
        Ok(())
    }
}
