//! The built-in log rules against lines real software prints (from public
//! bug reports of PyTorch, NCCL, Megatron, the NVIDIA driver, the Linux
//! kernel and Slurm), and benign look-alikes that must not match.

use unicron_core::detector::rules::{BUILTIN_RULES, LogRules, RulesFile};
use unicron_core::{FailureKind, Severity};

fn kind_of(rules: &LogRules, line: &str) -> Option<FailureKind> {
    rules.classify(line).map(|c| c.kind)
}

const FAILING: &[(&str, &str)] = &[
    // NCCL timeouts (PyTorch ProcessGroupNCCL watchdog)
    (
        "nccl_timeout",
        "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52311, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800086 milliseconds before timing out.",
    ),
    (
        "nccl_timeout",
        "RuntimeError: NCCL communicator was aborted on rank 12. Original reason for failure was: [Rank 12] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST) ran for 600000 milliseconds before timing out.",
    ),
    (
        "nccl_timeout",
        "torch.distributed.DistBackendError: [7] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store; allgather timed out after 1800000 ms",
    ),
    // NCCL system / remote errors and InfiniBand completion errors
    (
        "network_error",
        "misc/socket.cc:484 NCCL WARN NET/IB : Got completion from peer 10.10.3.17<37541> with error 12, opcode 129, len 0, vendor err 129 (Recv)",
    ),
    (
        "network_error",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, remote process exited or there was a network error, NCCL version 2.18.1\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    ),
    (
        "network_error",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
    ),
    (
        "network_error",
        "transport/net_ib.cc:1295 NCCL WARN NET/IB : mlx5_0:1 Got async event : transport retry counter exceeded",
    ),
    (
        "network_error",
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 15/16 clients joined.",
    ),
    // NIC link down (kernel drivers)
    (
        "link_flapping",
        "kernel: mlx5_core 0000:3b:00.0 ens1f0np0: Link down",
    ),
    (
        "link_flapping",
        "kernel: bnxt_en 0000:41:00.0 eth2: NIC Link is Down",
    ),
    (
        "link_flapping",
        "kernel: ice 0000:86:00.0 ens5f0: NIC Link is Down",
    ),
    // connections
    (
        "connection_refused",
        "RuntimeError: The client socket has failed to connect to [node-17]:29500 (errno: 111 - Connection refused).",
    ),
    (
        "connection_refused",
        "ConnectionRefusedError: [Errno 111] Connection refused",
    ),
    (
        "connection_reset",
        "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer",
    ),
    (
        "connection_reset",
        "ConnectionResetError: [Errno 104] Connection reset by peer",
    ),
    // XID codes (NVRM kernel lines) mapped by code
    (
        "gpu_driver_error",
        "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1943, GPU has fallen off the bus.",
    ),
    (
        "gpu_driver_error",
        "kernel: NVRM: Xid (PCI:0000:b7:00): 119, pid=3021, name=python, Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL)",
    ),
    (
        "ecc_error",
        "kernel: NVRM: Xid (PCI:0000:ca:00): 48, pid=221, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6.",
    ),
    (
        "ecc_error",
        "kernel: NVRM: Xid (PCI:0000:ca:00): 63, pid=221, Row Remapper: New row marked for remapping, reset gpu to activate.",
    ),
    (
        "ecc_error",
        "kernel: NVRM: Xid (PCI:0000:ca:00): 64, pid=221, Row Remapper Error",
    ),
    (
        "ecc_error",
        "kernel: NVRM: Xid (PCI:0000:1a:00): 94, pid=5510, Contained: SM (0x1). RST: No, D-RST: No",
    ),
    (
        "ecc_error",
        "kernel: NVRM: Xid (PCI:0000:1a:00): 95, pid=5510, Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
    ),
    (
        "nvlink_error",
        "kernel: NVRM: Xid (PCI:0000:5d:00): 74, pid=1, NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    ),
    (
        "illegal_memory_access",
        "kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=16, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1): Out Of Range Address",
    ),
    (
        "illegal_memory_access",
        "kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=2011, name=python, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f8a_00000000.",
    ),
    (
        "illegal_memory_access",
        "kernel: NVRM: Xid (PCI:0000:3b:00): 43, pid=2011, Ch 00000010",
    ),
    // hardware errors outside XIDs
    (
        "ecc_error",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ),
    (
        "nvlink_error",
        "NCCL WARN Cuda failure 'an NVLink error was detected'",
    ),
    (
        "invalid_dma_mapping",
        "kernel: DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault addr 0xffb7e000 [fault reason 0x06] PTE Read access is not set",
    ),
    (
        "invalid_dma_mapping",
        "kernel: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0027 address=0xfff00000 flags=0x0020]",
    ),
    (
        "gpu_driver_error",
        "NVRM: GPU at PCI:0000:3b:00: GPU-8f3b has fallen off the bus.",
    ),
    (
        "gpu_driver_error",
        "Failed to initialize NVML: Driver/library version mismatch",
    ),
    // CUDA errors, illegal memory access, OOM
    (
        "illegal_memory_access",
        "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call",
    ),
    (
        "cuda_error",
        "RuntimeError: CUDA error: device-side assert triggered",
    ),
    (
        "cuda_error",
        "RuntimeError: CUDA error: unspecified launch failure",
    ),
    (
        "cuda_error",
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
    ),
    (
        "out_of_memory",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
    ),
    (
        "out_of_memory",
        "kernel: Out of memory: Killed process 48211 (python) total-vm:1044813272kB, anon-rss:512000000kB",
    ),
    (
        "out_of_memory",
        "kernel: Memory cgroup out of memory: Killed process 9981 (pt_main_thread)",
    ),
    // hangs, node loss, exits
    (
        "task_hang",
        "[E ProcessGroupNCCL.cpp:1357] [PG 0 Rank 5] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
    ),
    (
        "lost_connection",
        "torch.distributed.elastic.rendezvous.api.RendezvousError: The node 'gpu-node-042_1234_0' has failed to send a keep-alive heartbeat to the rendezvous 'job-7' due to an error of type RendezvousTimeoutError.",
    ),
    (
        "lost_connection",
        "slurmstepd: error: *** JOB 84212 ON gpu-node-017 CANCELLED AT 2026-03-01T10:22:01 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    ),
    (
        "exited_abnormally",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED",
    ),
    (
        "exited_abnormally",
        "[ERROR] failed (exitcode: -11) local_rank: 3 (pid: 22817) of binary: /usr/bin/python",
    ),
    (
        "exited_abnormally",
        "Fatal Python error: Segmentation fault",
    ),
    (
        "exited_abnormally",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    ),
    // What unicron kube-watch writes of node conditions and pods.
    (
        "gpu_driver_error",
        "kubernetes: node gpu-3 condition SysLogsXIDError=True (SysLogsXIDErrorIsNotHealthy): ErrorCode:79 PCI:0000:3b:00 GPU has fallen off the bus",
    ),
    (
        "ecc_error",
        "kubernetes: node gpu-3 condition SysLogsXIDError=True (XidError): Xid 48: DBE detected",
    ),
    (
        "nvlink_error",
        "kubernetes: node gpu-3 condition GpuNvlinkWatch=True (GpuNvlinkWatchIsNotHealthy): NVLink link 4 is down",
    ),
    (
        "ecc_error",
        "kubernetes: node gpu-3 condition GpuMemWatch=True (GpuMemWatchIsNotHealthy): volatile DBE count 2",
    ),
    (
        "out_of_memory",
        "kubernetes: container trainer of pod train/gpt-workers-0-1 was OOMKilled (exit code 137)",
    ),
    (
        "exited_abnormally",
        "kubernetes: container trainer of pod train/gpt-workers-0-1 terminated with exit code 1 (Error)",
    ),
    (
        "exited_abnormally",
        "kubernetes: pod train/gpt-workers-0-1 on node gpu-3 was evicted (EvictionByEvictionAPI: Eviction API: evicting); its workers were killed",
    ),
];

const BENIGN: &[&str] = &[
    "gpu-node-001:1234:1234 [0] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7",
    "gpu-node-001:1234:1290 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/NVLink",
    "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
    "NCCL INFO comm 0x5581 rank 0 nRanks 64 nNodes 8 localRanks 8 localRank 0 MNNVL 0 - Init COMPLETE",
    " iteration     1200/  500000 | consumed samples:      1228800 | elapsed time per iteration (ms): 2143.2 | learning rate: 1.499E-04 | lm loss: 2.317E+00 | loss scale: 1.0 | grad norm: 0.412 |",
    "[W ProcessGroupNCCL.cpp:1849] Warning: TORCH_NCCL_ASYNC_ERROR_HANDLING is set; the NCCL timeout is 1800000 ms",
    "WARNING: timeout for barrier set to 600 seconds",
    "[W socket.cpp:436] [c10d] The server socket has started to listen on [::]:29500.",
    "kernel: mlx5_core 0000:3b:00.0 ens1f0np0: Link up",
    "kernel: ice 0000:86:00.0 ens5f0: NIC Link is Up 100 Gbps Full Duplex, Flow Control: None",
    "saving checkpoint at iteration   2000 to /ckpt/gpt3-175b",
    "  successfully saved checkpoint at iteration    2000 to /ckpt/gpt3-175b",
    "ECC Mode: Enabled",
    "GPU 0: ECC errors: 0 volatile, 0 aggregate",
    "[INFO] worker group successfully finished; waiting 300 seconds for other agents to finish (exitcode: 0)",
    "Process 4412 exited with code 0",
    "time to initialize megatron (seconds): 62.113",
    "nvidia-smi: NVLink status: all links active",
    "kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
    "torch.distributed: using TCPStore at 10.0.0.1:29500",
];

#[test]
fn every_failing_line_gets_its_kind() {
    let rules = LogRules::builtin();
    let mut wrong = Vec::new();
    for (kind, line) in FAILING {
        let got = kind_of(&rules, line).map(|k| k.symbol().to_string());
        if got.as_deref() != Some(*kind) {
            wrong.push(format!("expected {kind}, got {got:?}: {line}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn benign_look_alikes_do_not_match() {
    let rules = LogRules::builtin();
    let matched: Vec<String> = BENIGN
        .iter()
        .filter_map(|line| {
            rules
                .classify(line)
                .map(|c| format!("{} by {}: {line}", c.kind, c.rule))
        })
        .collect();
    assert!(matched.is_empty(), "{}", matched.join("\n"));
}

#[test]
fn every_log_detectable_kind_has_a_rule_with_a_real_line() {
    // Straggler and unknown come only from metrics/statistics.
    for kind in FailureKind::ALL {
        if matches!(kind, FailureKind::Straggler | FailureKind::Unknown) {
            continue;
        }
        assert!(
            FAILING.iter().any(|(k, _)| *k == kind.symbol()),
            "no test line for {kind}"
        );
    }
}

#[test]
fn severities_follow_the_taxonomy_and_captures_name_the_lost_node() {
    let rules = LogRules::builtin();
    let ecc = rules.classify(FAILING[17].1).unwrap();
    assert_eq!(
        (ecc.kind, ecc.severity, ecc.rule.as_str()),
        (FailureKind::EccError, Severity::Sev1, "nvrm.xid")
    );
    let lost = rules
        .classify("The node 'gpu-node-042' has failed to send a keep-alive heartbeat to the rendezvous 'r'")
        .unwrap();
    assert_eq!(lost.node.as_deref(), Some("gpu-node-042"));
    let slurm = rules
        .classify(
            "*** JOB 1 ON gpu-node-017 CANCELLED AT 2026-03-01T10:22:01 DUE TO NODE FAILURE ***",
        )
        .unwrap();
    assert_eq!(slurm.node.as_deref(), Some("gpu-node-017"));
}

#[test]
fn unlisted_xids_are_unknown_and_benign_xids_are_ignored() {
    let rules = LogRules::builtin();
    assert_eq!(
        kind_of(
            &rules,
            "NVRM: Xid (PCI:0000:3b:00): 8, pid=1, Channel exception"
        ),
        Some(FailureKind::Unknown)
    );
    assert_eq!(
        kind_of(&rules, "NVRM: Xid (PCI:0000:3b:00): 45, pid=1, Ch 0000001e"),
        None
    );
}

#[test]
fn user_rules_override_extend_and_disable_builtins() {
    let user = r#"
[[rule]]
name = "site.lustre"
kind = "network_error"
keywords = ["lustreerror"]
pattern = 'LustreError: .* timed out'

[[rule]]
name = "nic.link_down"
disable = true

[xid]
none = [8]
"#;
    let rules = LogRules::with_user(user).unwrap();
    assert_eq!(
        kind_of(
            &rules,
            "LustreError: 1123:0:(client.c:2289) @@@ Request sent has timed out"
        ),
        Some(FailureKind::NetworkError)
    );
    assert_eq!(
        kind_of(&rules, "kernel: bnxt_en eth2: NIC Link is Down"),
        None
    );
    assert_eq!(
        kind_of(&rules, "NVRM: Xid (PCI:0000:3b:00): 8, pid=1"),
        None
    );
    assert_eq!(rules.len(), LogRules::builtin().len());
}

#[test]
fn bad_rule_files_name_the_rule_and_field() {
    let bad_regex = "[[rule]]\nname = \"x\"\nkind = \"cuda_error\"\nkeywords = [\"a\"]\npattern = '(unclosed'\n";
    let err = LogRules::with_user(bad_regex).unwrap_err().to_string();
    assert!(err.starts_with("rule `x`: field `pattern`"), "{err}");
    let bad_kind =
        "[[rule]]\nname = \"y\"\nkind = \"gpu_on_fire\"\nkeywords = [\"a\"]\npattern = 'a'\n";
    let err = LogRules::with_user(bad_kind).unwrap_err().to_string();
    assert!(err.contains("rule `y`: field `kind`"), "{err}");
    let no_keywords = "[[rule]]\nname = \"z\"\nkind = \"cuda_error\"\npattern = 'a'\n";
    let err = LogRules::with_user(no_keywords).unwrap_err().to_string();
    assert!(err.contains("field `keywords`"), "{err}");
    assert!(RulesFile::parse("[[rule]]\nnmae = 1").is_err());
    assert!(RulesFile::parse(BUILTIN_RULES).is_ok());
}

#[test]
fn megabyte_lines_are_classified_by_their_prefix() {
    let rules = LogRules::builtin();
    let mut line =
        String::from("RuntimeError: CUDA error: an illegal memory access was encountered ");
    line.push_str(&"é".repeat(600_000));
    assert_eq!(
        kind_of(&rules, &line),
        Some(FailureKind::IllegalMemoryAccess)
    );
    let benign = "x".repeat(2_000_000);
    assert_eq!(kind_of(&rules, &benign), None);
}

/// An explanation names the rule, the keyword that let it be tried, the
/// text it matched and the rules tried before it; a benign line has none.
#[test]
fn explain_names_the_rule_its_keyword_and_match_and_nothing_for_a_benign_line() {
    let rules = LogRules::builtin();
    let xid = rules
        .explain("[  312.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.")
        .unwrap();
    assert_eq!(xid.classified.rule, "nvrm.xid");
    assert_eq!(xid.classified.kind, FailureKind::GpuDriverError);
    assert_eq!(xid.xid, Some(79));
    assert_eq!(xid.keyword, "xid");
    assert_eq!(xid.matched, "NVRM: Xid (PCI:0000:3b:00): 79");

    // `gpu.driver_error` would take "fallen off the bus" too, but the Xid
    // rule comes first; an NCCL timeout line passes over rules whose
    // keywords it contains.
    let timeout = rules
        .explain("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600013 milliseconds before timing out.")
        .unwrap();
    assert_eq!(timeout.classified.rule, "nccl.watchdog_timeout");
    assert_eq!(timeout.keyword, "collective operation timeout");
    assert!(
        timeout
            .matched
            .starts_with("Watchdog caught collective operation timeout")
    );
    assert!(
        timeout
            .passed_over
            .iter()
            .all(|(_, why)| *why == "pattern did not match"),
        "{:?}",
        timeout.passed_over
    );

    assert_eq!(
        rules.explain("iter 83592: loss 1.5455, time: 4401.19ms"),
        None
    );
    // A keyword alone explains nothing: the line is benign.
    assert_eq!(
        rules.explain("NCCL INFO NET/OFI Selected Provider is efa"),
        None
    );
}
