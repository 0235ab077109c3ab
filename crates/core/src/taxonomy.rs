//! The failure taxonomy of the Unicron paper (docs/design.md §7): kinds, severities and their defaults.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Defines [`FailureKind`] once: each kind with its symbol (the Unicron
/// paper's taxonomy, shared by the Avro schema, JSON and the CLI) and its
/// default severity. `ALL`, `symbol()` and `default_severity()` come from
/// this one table; the Avro enum, the simulator's mix and the docs' tables
/// are tested against `ALL`.
macro_rules! failure_kinds {
    ($($(#[$doc:meta])* $kind:ident = $symbol:literal, $severity:ident;)*) => {
        /// A failure kind. The serialized symbols are exactly those of the
        /// Unicron paper's taxonomy table.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum FailureKind {
            $($(#[$doc])* #[serde(rename = $symbol)] $kind,)*
        }

        impl FailureKind {
            /// Every kind, in the order of the schema's symbols.
            pub const ALL: &'static [FailureKind] = &[$(FailureKind::$kind,)*];

            /// The symbol used in schemas, JSON and the CLI.
            pub fn symbol(self) -> &'static str {
                match self {
                    $(FailureKind::$kind => $symbol,)*
                }
            }

            /// The severity the Unicron paper assigns to the kind. `unknown`
            /// ("others") has none in the paper; we treat it as SEV2
            /// (restart) because a restart is the cheapest action that
            /// recovers from an unexplained software fault.
            pub fn default_severity(self) -> Severity {
                match self {
                    $(FailureKind::$kind => Severity::$severity,)*
                }
            }
        }
    };
}

failure_kinds! {
    NcclTimeout = "nccl_timeout", Sev3;
    EccError = "ecc_error", Sev1;
    NvlinkError = "nvlink_error", Sev1;
    NetworkError = "network_error", Sev3;
    LinkFlapping = "link_flapping", Sev3;
    TaskHang = "task_hang", Sev2;
    IllegalMemoryAccess = "illegal_memory_access", Sev2;
    InvalidDmaMapping = "invalid_dma_mapping", Sev1;
    ConnectionRefused = "connection_refused", Sev3;
    CudaError = "cuda_error", Sev2;
    ConnectionReset = "connection_reset", Sev3;
    GpuDriverError = "gpu_driver_error", Sev1;
    LostConnection = "lost_connection", Sev1;
    ExitedAbnormally = "exited_abnormally", Sev2;
    OutOfMemory = "out_of_memory", Sev2;
    Straggler = "straggler", Sev3;
    /// Anything not classified; also what old readers see for symbols added later.
    Unknown = "unknown", Sev2;
}

/// How bad a failure is, and so which recovery it gets (the Unicron paper):
/// SEV3 reattempt in place, SEV2 restart, SEV1 isolate the node and re-plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Severity {
    #[serde(rename = "SEV1")]
    Sev1,
    #[serde(rename = "SEV2")]
    Sev2,
    #[serde(rename = "SEV3")]
    Sev3,
    /// Not known; the Avro enum's default symbol.
    #[serde(rename = "UNKNOWN")]
    Unknown,
}

impl Severity {
    /// The symbol used in schemas, JSON and the CLI.
    pub fn symbol(self) -> &'static str {
        match self {
            Severity::Sev1 => "SEV1",
            Severity::Sev2 => "SEV2",
            Severity::Sev3 => "SEV3",
            Severity::Unknown => "UNKNOWN",
        }
    }

    /// The next harsher severity, for escalation when a milder action failed
    /// (SEV3 → SEV2 → SEV1; SEV1 stays).
    pub fn escalate(self) -> Severity {
        match self {
            Severity::Sev3 => Severity::Sev2,
            Severity::Sev2 | Severity::Sev1 | Severity::Unknown => Severity::Sev1,
        }
    }
}

/// A symbol that names no kind or severity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown symbol `{0}`")]
pub struct UnknownSymbol(pub String);

impl FromStr for FailureKind {
    type Err = UnknownSymbol;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FailureKind::ALL
            .iter()
            .copied()
            .find(|k| k.symbol() == s)
            .ok_or_else(|| UnknownSymbol(s.to_string()))
    }
}

impl FromStr for Severity {
    type Err = UnknownSymbol;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Severity::Sev1,
            Severity::Sev2,
            Severity::Sev3,
            Severity::Unknown,
        ]
        .into_iter()
        .find(|v| v.symbol() == s)
        .ok_or_else(|| UnknownSymbol(s.to_string()))
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_symbols_are_the_paper_symbols() {
        for &kind in FailureKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.symbol()));
            assert_eq!(kind.symbol().parse::<FailureKind>().unwrap(), kind);
        }
        assert_eq!(serde_json::to_string(&Severity::Sev1).unwrap(), "\"SEV1\"");
        assert!("sev1".parse::<Severity>().is_err());
    }

    #[test]
    fn severities_follow_the_paper_table() {
        assert_eq!(FailureKind::NcclTimeout.default_severity(), Severity::Sev3);
        assert_eq!(FailureKind::EccError.default_severity(), Severity::Sev1);
        assert_eq!(FailureKind::TaskHang.default_severity(), Severity::Sev2);
        assert_eq!(
            FailureKind::LostConnection.default_severity(),
            Severity::Sev1
        );
        assert_eq!(FailureKind::Straggler.default_severity(), Severity::Sev3);
    }

    #[test]
    fn escalation_climbs_to_sev1_and_stays() {
        assert_eq!(Severity::Sev3.escalate(), Severity::Sev2);
        assert_eq!(Severity::Sev2.escalate(), Severity::Sev1);
        assert_eq!(Severity::Sev1.escalate(), Severity::Sev1);
    }
}
