//! Failures: when the next one comes (from the trace or the taxonomy's
//! mix), where it strikes, what it breaks and shows, and how a silent
//! stall ends at the collective timeout.

use std::collections::BTreeMap;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use unicron_core::{FailureKind, LogRecord, Severity};

use super::{Emission, Job, NodeState, Phase, Sim, TICK_MS};
use crate::config::{Arrivals, NcclTimeoutShows};
use crate::faults::{self, TraceEntry};
use crate::truth::Fault;

const SIGABRT: i32 = 6;

/// The time to the next random failure, ms.
pub(super) fn interval(rng: &mut ChaCha8Rng, arrivals: Arrivals, mean_ms: f64) -> i64 {
    match arrivals {
        Arrivals::Poisson => faults::exponential_ms(rng, mean_ms),
        Arrivals::Demo => (rng.random_range(0.5..1.5) * mean_ms) as i64,
    }
}

impl Sim {
    /// Injects the trace's entries that are due, then the random failures.
    pub(super) fn inject_due(&mut self, out: &mut Vec<Emission>) {
        let start = self.config.start_ms;
        while self
            .trace
            .front()
            .is_some_and(|entry| entry.at_ms(start) <= self.now)
            && let Some(entry) = self.trace.pop_front()
        {
            self.inject(Some(&entry), entry.kind, out);
            self.truth.offered.push(entry);
        }
        let (arrivals, mean_ms) = (self.config.arrivals, self.config.mean_interval_s() * 1000.0);
        while let Some(at) = self.next_random_fault
            && at <= self.now
        {
            let from = match arrivals {
                Arrivals::Poisson => at,
                // A demo failure waits for a running job to hit.
                Arrivals::Demo if self.eligible_nodes().is_empty() => break,
                Arrivals::Demo => self.now,
            };
            let kind = self.next_kind();
            self.inject(None, kind, out);
            self.next_random_fault =
                Some(from + interval(&mut self.fault_rng, arrivals, mean_ms).max(TICK_MS));
        }
    }

    /// When NCCL's watchdog ends `job`'s hang, if it hangs and the watchdog
    /// has not fired yet. A hang shows no other sign: without the watchdog
    /// a hang the detector's statistics miss (a job fewer than
    /// `hang_min_iterations` iterations into a start) would stall the job
    /// for the rest of the run, which no real cluster does.
    pub(super) fn watchdog_due(&self, job: &Job) -> Option<i64> {
        let index = job.fault?;
        let fault = &self.truth.faults[index];
        (self.stalls(fault.kind) && job.watchdog_fired != Some(index))
            .then_some(fault.injected_ms + self.config.collective_timeout_ms())
    }

    /// Whether a failure of `kind` stalls its job silently until the
    /// collective timeout: a hang, and an NCCL timeout modelled as the
    /// stall it is.
    pub(super) fn stalls(&self, kind: FailureKind) -> bool {
        kind == FailureKind::TaskHang
            || (kind == FailureKind::NcclTimeout
                && self.config.nccl_timeout == NcclTimeoutShows::Stall)
    }

    /// Stalls nothing has acted on by the collective timeout: the hung rank
    /// logs the watchdog's timeout and aborts (PyTorch's default on a
    /// timed-out collective), which the control plane sees as a crashed
    /// process.
    pub(super) fn fire_watchdogs(&mut self, out: &mut Vec<Emission>) {
        // (job position, the hang's fault index)
        let due: Vec<(usize, usize)> = self
            .jobs
            .iter()
            .enumerate()
            .filter_map(|(position, (id, job))| {
                let index = job.fault?;
                (self.watchdog_due(job).is_some_and(|at| at <= self.now)
                    && !self.has_pending_action(id))
                .then_some((position, index))
            })
            .collect();
        let timeout_ms = self.config.collective_timeout_ms();
        for (position, index) in due {
            let node = self.truth.faults[index].node.clone();
            let id = self.jobs.name(position).to_string();
            let job = &mut self.jobs[position];
            job.watchdog_fired = Some(index);
            let rank = job.nodes.iter().position(|n| *n == node).unwrap_or(0) as u32;
            out.push(Emission::Log(LogRecord {
                cluster: self.config.cluster.clone(),
                node: node.clone(),
                time_ms: self.now,
                source: "training".into(),
                job: Some(id.clone()),
                rank: Some(rank as i32),
                gpu: None,
                line: format!(
                    "[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52311, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={timeout_ms}) ran for {} milliseconds before timing out.",
                    timeout_ms + 86
                ),
                attributes: BTreeMap::new(),
            }));
            out.push(self.exit(&node, &id, rank, None, Some(SIGABRT)));
        }
    }

    /// The kind of the next random failure: from the mix, except that demo
    /// arrivals first show each severity once.
    fn next_kind(&mut self) -> FailureKind {
        if self.demo_severities.is_empty() {
            return faults::pick(self.fault_rng.random());
        }
        let i = self.fault_rng.random_range(0..self.demo_severities.len());
        let severity = self.demo_severities.remove(i);
        faults::pick_with(severity, self.fault_rng.random())
    }

    /// Healthy nodes of running jobs, where a failure can strike: each as
    /// (node position, its job's position), in node order.
    fn eligible_nodes(&self) -> Vec<(usize, usize)> {
        self.nodes
            .values()
            .enumerate()
            .filter(|(_, n)| n.state == NodeState::Up && n.fault.is_none())
            .filter_map(|(position, n)| {
                let job = self.jobs.position(n.job.as_deref()?)?;
                let running = &self.jobs[job];
                (running.phase == Phase::Running && running.fault.is_none())
                    .then_some((position, job))
            })
            .collect()
    }

    /// Injects `kind` on the node of `entry`, or on a random node of a
    /// running job.
    fn inject(&mut self, entry: Option<&TraceEntry>, kind: FailureKind, out: &mut Vec<Emission>) {
        // Drawn whether or not they are used: one fault, two draws.
        let (target, gpu): (f64, u32) = (
            self.fault_rng.random(),
            self.fault_rng.random_range(0..self.config.gpus_per_node),
        );
        let eligible = self.eligible_nodes();
        let chosen = match entry {
            Some(entry) => eligible
                .iter()
                .copied()
                .find(|(n, _)| self.nodes.name(*n) == entry.node),
            None if eligible.is_empty() => None,
            None => {
                Some(eligible[((target * eligible.len() as f64) as usize).min(eligible.len() - 1)])
            }
        };
        let Some((node, job)) = chosen else {
            self.truth.skipped += 1;
            return;
        };
        let name = self.nodes.name(node).to_string();
        let job_id = self.jobs.name(job).to_string();
        let rank = self.jobs[job]
            .nodes
            .iter()
            .position(|n| *n == name)
            .unwrap_or(0) as u32;
        if self.sparse {
            self.sparse_history(node, job, kind, out);
        }
        let index = self.truth.faults.len();
        let mut fault = Fault::new(index, kind, &name, Some(job_id.clone()), gpu, self.now);
        if let Some(entry) = entry {
            if let Some(repair_s) = entry.repair_s {
                fault.needs = Severity::Sev1;
                fault.repaired_at_ms = Some(self.now + (repair_s * 1000.0).round() as i64);
            }
            fault.category = entry.category.clone();
        }
        self.truth.faults.push(fault);
        let mut shown = faults::manifest(kind, &name, gpu, rank);
        if self.stalls(kind) {
            // Its line, if any, is the watchdog's at the collective timeout.
            shown.lines.clear();
        }
        let struck = &mut self.nodes[node];
        struck.fault = Some(index);
        if let Some(counter) = shown.counter
            && counter == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
        {
            struck.ecc_dbe[gpu as usize] += 1.0;
        }
        if shown.node_down {
            struck.state = NodeState::Down;
        }
        let job = &mut self.jobs[job];
        job.phase = Phase::Stalled;
        job.fault = Some(index);
        for line in shown.lines {
            out.push(Emission::Log(LogRecord {
                cluster: self.config.cluster.clone(),
                node: name.clone(),
                time_ms: self.now,
                source: if line.starts_with("kernel:") {
                    "kmsg".into()
                } else {
                    "training".into()
                },
                job: Some(job_id.clone()),
                rank: Some(rank as i32),
                gpu: Some(gpu as i32),
                line,
                attributes: BTreeMap::new(),
            }));
        }
        if let Some(code) = shown.exit_code {
            out.push(self.exit(&name, &job_id, rank, Some(code), None));
        }
    }
}
