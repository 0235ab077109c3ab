//! Log classification throughput on one core, mostly benign lines (as real
//! training logs are). `cargo bench -p unicron-tests --bench classify_lines`
//! prints one table. Outside `unicron-core` because it reads the wall clock.

use std::time::Instant;

use unicron_core::detector::LogRules;
use unicron_core::detector::rules::Verdict;

const BENIGN: &[&str] = &[
    "gpu-node-017:48211:48211 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/NVLink",
    " iteration     1200/  500000 | consumed samples:      1228800 | elapsed time per iteration (ms): 2143.2 | learning rate: 1.499E-04 | lm loss: 2.317E+00 | loss scale: 1.0 | grad norm: 0.412 |",
    "[2026-11-30 10:22:01,482] [INFO] [logging.py:96:log_dist] [Rank 0] step=1200, skipped=0, lr=[0.00014990], mom=[(0.9, 0.95)]",
    "[W ProcessGroupNCCL.cpp:1849] Warning: TORCH_NCCL_ASYNC_ERROR_HANDLING is set; the NCCL timeout is 1800000 ms",
    "  successfully saved checkpoint at iteration    2000 to /ckpt/gpt3-175b",
    "kernel: mlx5_core 0000:3b:00.0 ens1f0np0: Link up",
    "time (ms) | forward-compute: 612.3 | backward-compute: 1288.1 | optimizer: 41.2 | batch-generator: 1.1",
    "NCCL INFO comm 0x5581 rank 12 nRanks 64 nNodes 8 localRanks 8 localRank 4 MNNVL 0 - Init COMPLETE",
];

const FAILING: &[&str] = &[
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52311, OpType=ALLREDUCE) ran for 1800086 milliseconds before timing out.",
    "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1943, GPU has fallen off the bus.",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "misc/socket.cc:484 NCCL WARN NET/IB : Got completion from peer 10.10.3.17<37541> with error 12, opcode 129, len 0, vendor err 129 (Recv)",
];

fn main() {
    let with_tier = LogRules::builtin();
    let rules_only = LogRules::with_user("learned = false").expect("rules compile");
    // 1% failing lines, the rest benign, interleaved deterministically.
    let lines: Vec<&str> = (0..1_000_000)
        .map(|i| {
            if i % 100 == 0 {
                FAILING[(i / 100) % FAILING.len()]
            } else {
                BENIGN[i % BENIGN.len()]
            }
        })
        .collect();
    let bytes: usize = lines.iter().map(|l| l.len()).sum();
    println!("| corpus | rules | lines | failing | runs | best lines/s | best MB/s | target |");
    println!("|---|---|---:|---:|---:|---:|---:|---|");
    for (name, corpus) in [
        ("99% benign", lines.clone()),
        (
            "benign only",
            lines
                .iter()
                .copied()
                .filter(|l| !FAILING.contains(l))
                .collect(),
        ),
    ] {
        for (tier, rules) in [
            ("rules and learned tier", &with_tier),
            ("markers, tier off", &rules_only),
        ] {
            let mut best = f64::MAX;
            let mut failing = 0;
            for _ in 0..5 {
                let started = Instant::now();
                failing = corpus
                    .iter()
                    .filter(|l| {
                        matches!(
                            rules.verdict(l),
                            Verdict::Failure { .. } | Verdict::Learned { .. }
                        )
                    })
                    .count();
                best = best.min(started.elapsed().as_secs_f64());
            }
            let corpus_bytes: usize = corpus.iter().map(|l| l.len()).sum();
            println!(
                "| {name} | {tier} | {} | {failing} | 5 | {:.0} | {:.0} | ≥ 1,000,000 lines/s |",
                corpus.len(),
                corpus.len() as f64 / best,
                corpus_bytes as f64 / best / 1e6,
            );
        }
    }
    let _ = bytes;
}
