//! Which failures the simulator injects, how often, and what each looks
//! like on the wire: the lines real software prints, the DCGM counters that
//! move, whether the process exits and whether the node goes dark.

use std::path::Path;

use unicron_core::{FailureKind, Severity};

/// Shares of the injected failure mix. The first twelve are the Unicron paper's
/// taxonomy (share of failed top-5% jobs); the last three are not given
/// there and are ASSUMPTIONS: node loss 3.0% (Acme lists node failure as
/// 14% of lost GPU time), abnormal exit 2.0%, out of memory 1.0% (Acme: 3.3%
/// of lost GPU time). `others` (3.3%) and stragglers are not injected: they
/// have no defined recovery.
pub const MIX: [(FailureKind, f64); 15] = [
    (FailureKind::NcclTimeout, 10.1),
    (FailureKind::EccError, 5.0),
    (FailureKind::NvlinkError, 4.5),
    (FailureKind::NetworkError, 4.0),
    (FailureKind::LinkFlapping, 3.9),
    (FailureKind::TaskHang, 3.1),
    (FailureKind::IllegalMemoryAccess, 2.1),
    (FailureKind::InvalidDmaMapping, 2.1),
    (FailureKind::ConnectionRefused, 2.1),
    (FailureKind::CudaError, 1.6),
    (FailureKind::ConnectionReset, 1.0),
    (FailureKind::GpuDriverError, 0.6),
    (FailureKind::LostConnection, 3.0),
    (FailureKind::ExitedAbnormally, 2.0),
    (FailureKind::OutOfMemory, 1.0),
];

/// The kinds the mix leaves out: with [`MIX`], every kind exactly once
/// (tested), so a new kind must be placed in one or the other.
pub const NOT_INJECTED: [FailureKind; 2] = [FailureKind::Straggler, FailureKind::Unknown];

/// Picks a kind from the mix with `u` uniform in [0, 1).
pub fn pick(u: f64) -> FailureKind {
    let total: f64 = MIX.iter().map(|(_, w)| w).sum();
    let mut left = u * total;
    for (kind, weight) in MIX {
        if left < weight {
            return kind;
        }
        left -= weight;
    }
    MIX[MIX.len() - 1].0
}

/// Picks a kind of severity `severity` (as [`needs`] sees it) from the
/// mix, weighted as in it, with `u` uniform in [0, 1).
pub fn pick_with(severity: Severity, u: f64) -> FailureKind {
    let of = || MIX.iter().filter(|(kind, _)| needs(*kind) == severity);
    let total: f64 = of().map(|(_, w)| w).sum();
    let mut left = u * total;
    let mut last = MIX[0].0;
    for &(kind, weight) in of() {
        if left < weight {
            return kind;
        }
        left -= weight;
        last = kind;
    }
    last
}

/// How a failure shows itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifestation {
    /// Lines the node logs, in order.
    pub lines: Vec<String>,
    /// The training process exits with this code.
    pub exit_code: Option<i32>,
    /// A DCGM counter of the GPU goes up by one.
    pub counter: Option<&'static str>,
    /// The node stops sending anything (heartbeats included).
    pub node_down: bool,
}

/// The severity that fixes a failure: SEV3 a reattempt, SEV2 a restart,
/// SEV1 taking the node out.
pub fn needs(kind: FailureKind) -> Severity {
    match kind.default_severity() {
        Severity::Unknown => Severity::Sev2,
        s => s,
    }
}

/// What `kind` looks like on `node`, GPU `gpu`, rank `rank`. The lines
/// are those of the detector's rule tests (public bug reports).
pub fn manifest(kind: FailureKind, node: &str, gpu: u32, rank: u32) -> Manifestation {
    let pci = format!("0000:{:02x}:00", 0x18 + gpu * 0x10);
    let line = |text: String| Manifestation {
        lines: vec![text],
        exit_code: None,
        counter: None,
        node_down: false,
    };
    let crash = |text: String| Manifestation {
        lines: vec![text],
        exit_code: Some(1),
        counter: None,
        node_down: false,
    };
    match kind {
        FailureKind::NcclTimeout => line(format!(
            "[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52311, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600086 milliseconds before timing out."
        )),
        FailureKind::EccError => Manifestation {
            lines: vec![format!(
                "kernel: NVRM: Xid (PCI:{pci}): 48, pid=2211, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
            )],
            exit_code: None,
            counter: Some("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
            node_down: false,
        },
        FailureKind::NvlinkError => line(format!(
            "kernel: NVRM: Xid (PCI:{pci}): 74, pid=2211, NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"
        )),
        FailureKind::NetworkError => line(format!(
            "{node}:2211:2890 [{gpu}] transport/net_ib.cc:1295 NCCL WARN NET/IB : mlx5_{gpu}:1 Got async event : transport retry counter exceeded"
        )),
        FailureKind::LinkFlapping => line(format!(
            "kernel: mlx5_core {pci}.0 ens{gpu}f0np0: Link down"
        )),
        FailureKind::TaskHang => Manifestation {
            lines: Vec::new(),
            exit_code: None,
            counter: None,
            node_down: false,
        },
        FailureKind::IllegalMemoryAccess => crash(
            "RuntimeError: CUDA error: an illegal memory access was encountered. CUDA kernel errors might be asynchronously reported at some other API call".into(),
        ),
        FailureKind::InvalidDmaMapping => line(format!(
            "kernel: DMAR: [DMA Read NO_PASID] Request device [{}:00.0] fault addr 0x7f3c2000 [fault reason 0x06] PTE Read access is not set",
            &pci[5..7]
        )),
        FailureKind::ConnectionRefused => line(format!(
            "RuntimeError: The client socket has failed to connect to [{node}]:29500 (errno: 111 - Connection refused)."
        )),
        FailureKind::CudaError => crash(
            "RuntimeError: CUDA error: unspecified launch failure. Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.".into(),
        ),
        FailureKind::ConnectionReset => {
            line("ConnectionResetError: [Errno 104] Connection reset by peer".into())
        }
        FailureKind::GpuDriverError => line(format!(
            "kernel: NVRM: Xid (PCI:{pci}): 79, pid=2211, GPU has fallen off the bus."
        )),
        FailureKind::LostConnection => Manifestation {
            lines: Vec::new(),
            exit_code: None,
            counter: None,
            node_down: true,
        },
        FailureKind::ExitedAbnormally => Manifestation {
            lines: Vec::new(),
            exit_code: Some(1),
            counter: None,
            node_down: false,
        },
        FailureKind::OutOfMemory => crash(format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {gpu} has a total capacity of 79.15 GiB of which 1.06 GiB is free."
        )),
        FailureKind::Straggler | FailureKind::Unknown => line(format!(
            "rank {rank}: unexpected error on {node}"
        )),
    }
}

/// Benign lines a healthy node logs now and then; none may match a rule.
pub const NOISE: [&str; 6] = [
    "NCCL INFO Channel 00/32 :    0[0] -> 1[1] via P2P/NVL",
    "NCCL INFO Connected all rings",
    "kernel: mlx5_core 0000:3b:00.0 ens1f0np0: Link up",
    "saving checkpoint at iteration to /checkpoints (async)",
    "kernel: nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error (First)",
    "data loader: prefetched 64 batches, queue depth 8",
];

/// One line of a failure trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEntry {
    /// Seconds after the simulation starts.
    pub at_s: f64,
    pub node: String,
    pub kind: FailureKind,
    /// A real trace's repair: the node stays broken (only taking it out
    /// fixes the failure, whatever its kind) and is back this many seconds
    /// after the entry. `None`: the kind's severity decides and an
    /// isolation lasts the cluster's `repair_s`.
    pub repair_s: Option<f64>,
    /// The trace's own name for the failure (a real trace's category).
    pub category: Option<String>,
}

/// The columns of a trace CSV; the last two are optional.
const COLUMNS: [&str; 5] = ["time_s", "node", "kind", "repair_s", "category"];

/// Why a trace file cannot be used, naming the line and field.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {field}: {reason}")]
    Bad {
        path: String,
        line: usize,
        field: &'static str,
        reason: String,
    },
    /// An event of a real trace (`index` counts from 1).
    #[error("{path}: event {index}: {field}: {reason}")]
    Event {
        path: String,
        index: usize,
        field: &'static str,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Format { path: String, reason: String },
}

impl TraceEntry {
    /// The entry's time, ms since the epoch, for a run started at `start_ms`.
    pub fn at_ms(&self, start_ms: i64) -> i64 {
        start_ms + (self.at_s * 1000.0).round() as i64
    }
}

/// One failure trace for a whole cluster, drawn before any policy runs:
/// Poisson arrivals of mean `mean_interval_s` over `duration_s`, each on a
/// node drawn uniformly from `nodes` (whatever runs there) with a kind from
/// the mix. Every policy of an evaluation is fed this same trace; a failure
/// that finds its node idle, down or its job already stopped is a no-op
/// for that policy, as it would be on a real cluster. Times are whole
/// milliseconds, so the CSV ([`write_trace`]) reads back exactly.
pub fn draw_trace(
    nodes: &[String],
    mean_interval_s: f64,
    duration_s: f64,
    seed: u64,
) -> Vec<TraceEntry> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x007a_ce0f_fa11);
    let mut out = Vec::new();
    if nodes.is_empty() || mean_interval_s <= 0.0 {
        return out;
    }
    let (mean_ms, end_ms) = (mean_interval_s * 1000.0, (duration_s * 1000.0) as i64);
    let mut at_ms = 0_i64;
    loop {
        at_ms += exponential_ms(&mut rng, mean_ms).max(1);
        if at_ms >= end_ms {
            return out;
        }
        let node = &nodes[rng.random_range(0..nodes.len())];
        out.push(TraceEntry {
            at_s: at_ms as f64 / 1000.0,
            node: node.clone(),
            kind: pick(rng.random()),
            repair_s: None,
            category: None,
        });
    }
}

/// A sample of an exponential distribution of mean `mean_ms`, ms: the time
/// to the next of Poisson arrivals.
pub(crate) fn exponential_ms(rng: &mut rand_chacha::ChaCha8Rng, mean_ms: f64) -> i64 {
    use rand::Rng;
    let u: f64 = rng.random();
    (-(1.0 - u).ln() * mean_ms) as i64
}

/// A trace as the CSV [`parse_trace`] reads: `time_s,node,kind`, and
/// `repair_s,category` too when an entry has either.
pub fn write_trace(entries: &[TraceEntry]) -> String {
    use std::fmt::Write;
    let long = entries
        .iter()
        .any(|e| e.repair_s.is_some() || e.category.is_some());
    let columns = if long { &COLUMNS[..] } else { &COLUMNS[..3] };
    let mut out = columns.join(",") + "\n";
    for e in entries {
        let _ = write!(out, "{:.3},{},{}", e.at_s, e.node, e.kind.symbol());
        if long {
            let repair = e.repair_s.map(|r| format!("{r:.3}")).unwrap_or_default();
            // A category holds no comma (see `parse_trace`).
            let category = e.category.as_deref().unwrap_or_default().replace(',', ";");
            let _ = write!(out, ",{repair},{category}");
        }
        out.push('\n');
    }
    out
}

/// Reads a trace CSV: header `time_s,node,kind` (optionally followed by
/// `repair_s,category`, each of which may be empty on a line), one failure
/// per line, `#` comments and blank lines ignored. Entries come back sorted
/// by time.
pub fn read_trace(path: &Path) -> Result<Vec<TraceEntry>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_trace(&text, &path.display().to_string())
}

pub fn parse_trace(text: &str, path: &str) -> Result<Vec<TraceEntry>, TraceError> {
    let bad = |line: usize, field: &'static str, reason: String| TraceError::Bad {
        path: path.to_string(),
        line,
        field,
        reason,
    };
    let mut entries = Vec::new();
    let mut header = None;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let number = index + 1;
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let Some(width) = header else {
            if fields != COLUMNS[..3] && fields != COLUMNS {
                return Err(bad(
                    number,
                    "header",
                    "must be `time_s,node,kind` or `time_s,node,kind,repair_s,category`".into(),
                ));
            }
            header = Some(fields.len());
            continue;
        };
        if fields.len() != width {
            return Err(bad(
                number,
                "line",
                format!("{} fields, want {width}", fields.len()),
            ));
        }
        let at_s: f64 = fields[0]
            .parse()
            .ok()
            .filter(|t: &f64| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| {
                bad(
                    number,
                    "time_s",
                    format!("`{}` is not seconds ≥ 0", fields[0]),
                )
            })?;
        if fields[1].is_empty() {
            return Err(bad(number, "node", "empty".into()));
        }
        let kind: FailureKind = fields[2].parse().map_err(|_| {
            bad(
                number,
                "kind",
                format!("`{}` is not a taxonomy symbol", fields[2]),
            )
        })?;
        let repair_s = match fields.get(3) {
            None | Some(&"") => None,
            Some(text) => Some(
                text.parse()
                    .ok()
                    .filter(|r: &f64| r.is_finite() && *r >= 0.0)
                    .ok_or_else(|| {
                        bad(number, "repair_s", format!("`{text}` is not seconds ≥ 0"))
                    })?,
            ),
        };
        let category = fields
            .get(4)
            .filter(|c| !c.is_empty())
            .map(|c| c.to_string());
        entries.push(TraceEntry {
            at_s,
            node: fields[1].to_string(),
            kind,
            repair_s,
            category,
        });
    }
    entries.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicron_core::detector::rules::LogRules;

    #[test]
    fn picks_within_a_severity_cover_its_kinds_and_only_them() {
        for severity in [Severity::Sev1, Severity::Sev2, Severity::Sev3] {
            let mut seen = std::collections::BTreeSet::new();
            for i in 0..1000 {
                let kind = pick_with(severity, f64::from(i) / 1000.0);
                assert_eq!(needs(kind), severity, "{kind}");
                seen.insert(kind);
            }
            let all = MIX.iter().filter(|(k, _)| needs(*k) == severity).count();
            assert_eq!(seen.len(), all, "{severity}: {seen:?}");
        }
    }

    #[test]
    fn every_injected_line_classifies_as_its_kind_and_noise_as_nothing() {
        let rules = LogRules::builtin();
        for (kind, _) in MIX {
            let shown = manifest(kind, "node-03", 5, 12);
            for line in &shown.lines {
                let got = rules.classify(line).map(|c| c.kind);
                assert_eq!(got, Some(kind), "{line}");
            }
            let silent = shown.lines.is_empty() && shown.exit_code.is_none() && !shown.node_down;
            assert_eq!(silent, kind == FailureKind::TaskHang, "{kind}");
        }
        for line in NOISE {
            assert!(rules.classify(line).is_none(), "{line}");
        }
    }

    #[test]
    fn the_mix_follows_the_shares() {
        assert_eq!(pick(0.0), FailureKind::NcclTimeout);
        assert_eq!(pick(0.999_999), FailureKind::OutOfMemory);
        let n = 10_000;
        let timeouts = (0..n)
            .filter(|i| pick(*i as f64 / n as f64) == FailureKind::NcclTimeout)
            .count();
        let total: f64 = MIX.iter().map(|(_, w)| w).sum();
        let want = 10.1 / total * n as f64;
        assert!((timeouts as f64 - want).abs() < 2.0, "{timeouts} vs {want}");
    }

    #[test]
    fn a_drawn_trace_covers_every_node_and_reads_back_exactly() {
        let nodes: Vec<String> = (0..16).map(|i| format!("node-{i:03}")).collect();
        let trace = draw_trace(&nodes, 600.0, 30.0 * 86_400.0, 5);
        // About 4,320 failures in 30 days at one per 10 min.
        assert!((4_000..4_700).contains(&trace.len()), "{}", trace.len());
        let hit: std::collections::BTreeSet<&str> = trace.iter().map(|e| e.node.as_str()).collect();
        assert_eq!(hit.len(), nodes.len());
        assert!(trace.windows(2).all(|w| w[0].at_s < w[1].at_s));
        let csv = write_trace(&trace);
        assert_eq!(parse_trace(&csv, "t").unwrap(), trace);
        assert_eq!(draw_trace(&nodes, 600.0, 30.0 * 86_400.0, 5), trace);
        assert_ne!(draw_trace(&nodes, 600.0, 30.0 * 86_400.0, 6), trace);
    }

    #[test]
    fn traces_parse_and_bad_lines_are_named() {
        let trace = parse_trace(
            "# a trace\ntime_s,node,kind\n30,node-01,ecc_error\n5.5, node-02 ,task_hang\n",
            "t.csv",
        )
        .unwrap();
        assert_eq!(trace.len(), 2);
        assert_eq!((trace[0].at_s, trace[0].node.as_str()), (5.5, "node-02"));
        let err = parse_trace("time_s,node,kind\n1,n,ecc\n", "t.csv").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.csv:2: kind: `ecc` is not a taxonomy symbol"
        );
        let err = parse_trace("when,node,kind\n", "t.csv").unwrap_err();
        assert!(err.to_string().contains("header"), "{err}");
        let err = parse_trace("time_s,node,kind\n-1,n,ecc_error\n", "t.csv").unwrap_err();
        assert!(err.to_string().contains(":2: time_s:"), "{err}");
    }

    #[test]
    fn repairs_and_categories_read_back_and_bad_repairs_are_named() {
        let text = "time_s,node,kind,repair_s,category\n\
                    10,node-01,ecc_error,7200,GPU/GPU DBE > Threshold\n\
                    20,node-02,lost_connection,,\n";
        let trace = parse_trace(text, "t.csv").unwrap();
        assert_eq!(trace[0].repair_s, Some(7200.0));
        assert_eq!(
            trace[0].category.as_deref(),
            Some("GPU/GPU DBE > Threshold")
        );
        assert_eq!(
            (trace[1].repair_s, trace[1].category.as_deref()),
            (None, None)
        );
        assert_eq!(parse_trace(&write_trace(&trace), "t").unwrap(), trace);
        let err = parse_trace(
            "time_s,node,kind,repair_s,category\n1,n,ecc_error,-5,x\n",
            "t.csv",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.csv:2: repair_s: `-5` is not seconds ≥ 0"
        );
        let err = parse_trace("time_s,node,kind\n1,n,ecc_error,5\n", "t.csv").unwrap_err();
        assert_eq!(err.to_string(), "t.csv:2: line: 4 fields, want 3");
    }
}
