//! The recovery systems compared, each as the evaluation models it: how
//! soon it learns of a failure, how long its mechanisms take, and the
//! source of every number.

use unicron_core::FailureKind;
use unicron_core::planner::PolicyName;

use super::Scenario;
use crate::config::Transitions;
use crate::faults;

/// One recovery system as the evaluation models it.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyModel {
    pub name: &'static str,
    pub planner: PolicyName,
    /// Failures of these kinds the system's code does not watch for: found
    /// when the collective timeout ends the job, not by unicron's detector.
    pub late: Vec<FailureKind>,
    /// No hang detection of its own: a hang is found only by what the
    /// collective timeout makes of it (the watchdog's line, the abort).
    pub blind_to_hangs: bool,
    pub transitions: Transitions,
    pub throughput_factor: f64,
    /// Its own checkpoint interval, if it differs from the cluster's.
    pub checkpoint_interval_s: Option<i64>,
    pub restart_rolls_back: bool,
    pub reconfigure_rolls_back: bool,
    /// Why it cannot run the scenario's models at all (with the source).
    pub cannot_run: Option<&'static str>,
}

/// Kinds that show as errors in logs while every process lives on: the
/// baselines have nothing that reads them, so the job stalls until the
/// collective timeout aborts it. An ASSUMPTION that favours none: NCCL
/// surfaces some of these as errors sooner.
const UNWATCHED_LINES: [FailureKind; 4] = [
    FailureKind::NetworkError,
    FailureKind::LinkFlapping,
    FailureKind::ConnectionRefused,
    FailureKind::ConnectionReset,
];

/// The agent's restart of a job's workers from its in-memory snapshot:
/// injection or detection to the first training step after the restore,
/// the slowest of the real-PyTorch faults (docs/BENCHMARKS.md, "Real
/// PyTorch": 2.12 s for a killed worker). State moved: 0.4 MB a node.
pub const MEASURED_RESTART_S: f64 = 2.12;
/// The same after a node loss, the state fetched from the peer's replica
/// (docs/BENCHMARKS.md: first step 1.75 s after the detection).
pub const MEASURED_RECONFIGURE_S: f64 = 1.75;
/// Restoring one rank's state from its agent's memory: the descriptor
/// handed back, the tensors built over it and copied into the model once
/// (docs/BENCHMARKS.md, "In-memory snapshots": `restore_s`, 1,048.6 MB in
/// 0.402 s on this 2-core machine, two ranks restoring at once).
pub const MEASURED_RESTORE_MB_S: f64 = 1048.6 / 0.402;
/// Moving one rank's state between agents over TCP, digest included
/// (docs/BENCHMARKS.md, "In-memory snapshots": `replica_s`, 1,048.6 MB in
/// 0.453 s, the median of steady replicas into reused memory).
pub const MEASURED_REPLICA_MB_S: f64 = 1048.6 / 0.453;
/// Training state per parameter: fp16 weights and gradients and fp32
/// master weights, momentum and variance (the ZeRO paper's 16 bytes).
pub const STATE_BYTES_PER_PARAMETER: f64 = 16.0;

/// Oobleck, GPT-3 6.7B: a lost node costs a 10 s re-instantiation of its
/// pipelines (Oobleck's SOSP '23 artifact, branch `sosp23-artifact`,
/// `crates/simulator/oobleck_simulator.py` L307
/// `local_rendezvous_timeout_delta = 10_000`, global 0 at L207).
pub const OOBLECK_RECONFIGURE_S: f64 = 10.0;
/// Varuna, GPT-3 6.7B: every lost node is a fatal failure and a restart of
/// 581 s plus a 120 s checkpoint (same artifact, `varuna_simulator.py` L347
/// `local_rendezvous_timeout_delta = 701_000` less L348
/// `checkpointing_overhead = 120_000` at L1071, the checkpoint at L1465).
pub const VARUNA_RESTART_S: f64 = 701.0;
/// Varuna checkpoints every 10 iterations (`varuna_simulator.py` L118
/// `checkpoint_per_iter=10`), 120 s each (L348).
pub const VARUNA_CHECKPOINT_S: f64 = 120.0;
/// GPT-3 6.7B iteration time in the artifact at 30 nodes: Varuna 5.2406
/// samples/s (L844-859), batch 1024: 195.4 s.
pub const VARUNA_ITERATION_S: f64 = 1024.0 / 5.2406;
/// Varuna's failure-free throughput against Oobleck's, GPT-3 6.7B on 30
/// nodes: 5.2406 / 5.5078 samples/s (`varuna_simulator.py` L844-859,
/// `oobleck_simulator.py` L668-683).
pub const VARUNA_VS_OOBLECK: f64 = 5.2406 / 5.5078;
/// Megatron-LM's default restart as the Unicron paper gives it: 9 min in the
/// queue, 14 min of set-up, then recomputing what was lost since the
/// checkpoint (the simulator rolls back).
pub const MEGATRON_RESTART_S: f64 = (9.0 + 14.0) * 60.0;
/// Why Bamboo is not run: Oobleck's artifact models it out of memory for
/// GPT-3 350M, 2.7B and 6.7B (`bamboo_simulator.py` L581, L652, L723:
/// `# OOM`, throughput 0), and every job here is GPT-3 1.3B or larger.
pub const BAMBOO_OOM: &str = "out of memory for GPT-3 350M and larger in Oobleck's artifact (bamboo_simulator.py L581/652/723)";

/// Every way back in of a system that knows one: `s` seconds.
fn every_transition(s: f64, resume_s: f64) -> Transitions {
    Transitions {
        reattempt_s: s,
        restart_replica_s: s,
        restart_checkpoint_s: s,
        reconfigure_s: s,
        resume_s,
    }
}

/// Seconds to move one rank's training state at `mb_s` MB/s, for the
/// largest per-rank state of `scenario`'s jobs. The ranks of a node move
/// theirs at once, each on its own stream (an ASSUMPTION: the measurement
/// had one rank).
pub fn state_move_s(scenario: &Scenario, mb_s: f64) -> f64 {
    (0..scenario.jobs as usize)
        .map(|i| scenario.workload.job(i).0)
        .map(|m| STATE_BYTES_PER_PARAMETER * m.parameters / f64::from(m.replica_gpus))
        .fold(0.0, f64::max)
        / (mb_s * 1e6)
}

/// unicron's transitions: the agent's measured restart and reconfiguration
/// plus the state restored at the measured rates (from the node's own
/// memory after a process fault; fetched from the peer's replica, then
/// restored, after a node loss), times `scenario`'s cost factor; a restart
/// from the checkpoint (no replica left) and a first start as for every
/// policy.
pub fn unicron_transitions(scenario: &Scenario) -> Transitions {
    let f = scenario.unicron_cost_factor;
    let from_memory = state_move_s(scenario, MEASURED_RESTORE_MB_S);
    let from_peer = state_move_s(scenario, MEASURED_REPLICA_MB_S) + from_memory;
    Transitions {
        reattempt_s: f * (MEASURED_RESTART_S + from_memory),
        restart_replica_s: f * (MEASURED_RESTART_S + from_memory),
        restart_checkpoint_s: Transitions::default().restart_checkpoint_s,
        reconfigure_s: f * (MEASURED_RECONFIGURE_S + from_peer),
        resume_s: Transitions::default().resume_s,
    }
}

/// The systems compared on `scenario`: unicron, Megatron's
/// checkpoint-restart, the elastic baselines from Oobleck's artifact, and
/// `elastic-single-job`: unicron with the cluster-wide plan taken away (the
/// hit job shrinks, no job moves for another), to show what the plan adds.
pub fn policies(scenario: &Scenario) -> Vec<PolicyModel> {
    let unicron = unicron_transitions(scenario);
    let resume_s = unicron.resume_s;
    let all_but_node_loss: Vec<FailureKind> = faults::MIX
        .iter()
        .map(|(k, _)| *k)
        // A stall's own line comes at the collective timeout already.
        .filter(|k| {
            !matches!(
                k,
                FailureKind::LostConnection | FailureKind::NcclTimeout | FailureKind::TaskHang
            )
        })
        .collect();
    let base = PolicyModel {
        name: "unicron",
        planner: PolicyName::Unicron,
        late: Vec::new(),
        blind_to_hangs: false,
        transitions: unicron.clone(),
        throughput_factor: 1.0,
        checkpoint_interval_s: None,
        restart_rolls_back: false,
        reconfigure_rolls_back: false,
        cannot_run: None,
    };
    vec![
        base.clone(),
        PolicyModel {
            name: "checkpoint-restart",
            planner: PolicyName::CheckpointRestart,
            // A dead node shows to its peers as a collective that never ends.
            late: [&UNWATCHED_LINES[..], &[FailureKind::LostConnection]].concat(),
            blind_to_hangs: true,
            transitions: every_transition(MEGATRON_RESTART_S, resume_s),
            restart_rolls_back: true,
            reconfigure_rolls_back: true,
            ..base.clone()
        },
        PolicyModel {
            name: "elastic-single-job",
            planner: PolicyName::ElasticSingleJob,
            ..base.clone()
        },
        // Oobleck's agent watches node loss only ("For now only consider
        // node failure, not worker failure", `oobleck/elastic/agent.py`
        // L97-98); anything else stalls the job until the collective
        // timeout, after which it is resubmitted as Megatron's is (an
        // ASSUMPTION: its code would leave it dead).
        PolicyModel {
            name: "oobleck",
            planner: PolicyName::ElasticSingleJob,
            late: all_but_node_loss,
            blind_to_hangs: true,
            transitions: Transitions {
                reconfigure_s: OOBLECK_RECONFIGURE_S,
                ..every_transition(MEGATRON_RESTART_S, resume_s)
            },
            restart_rolls_back: true,
            ..base.clone()
        },
        // Varuna: every change is a checkpointed restart that rolls back;
        // it checkpoints every 10 iterations at 120 s; its manager restarts
        // crashed workers and checks for hangs (`varuna/catch_all.py`).
        PolicyModel {
            name: "varuna",
            planner: PolicyName::ElasticSingleJob,
            late: UNWATCHED_LINES.to_vec(),
            blind_to_hangs: true,
            transitions: every_transition(VARUNA_RESTART_S, resume_s),
            throughput_factor: VARUNA_VS_OOBLECK * (10.0 * VARUNA_ITERATION_S)
                / (10.0 * VARUNA_ITERATION_S + VARUNA_CHECKPOINT_S),
            checkpoint_interval_s: Some((10.0 * VARUNA_ITERATION_S + VARUNA_CHECKPOINT_S) as i64),
            restart_rolls_back: true,
            reconfigure_rolls_back: true,
            ..base.clone()
        },
        PolicyModel {
            name: "bamboo",
            planner: PolicyName::ElasticSingleJob,
            cannot_run: Some(BAMBOO_OOM),
            ..base
        },
    ]
}
