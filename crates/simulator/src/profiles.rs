//! Training jobs of the GPT-3 family and their throughput profiles T(x).
//!
//! Sources (see `docs/simulator.md`):
//! - model sizes and global batch sizes in tokens: Brown et al., "Language
//!   Models are Few-Shot Learners" (2020), Table 2.1;
//! - achieved per-GPU throughput on A100-80GB: the Megatron-LM weak-scaling
//!   table (Narayanan et al., SC'21) quoted in the Unicron paper, taking the row of
//!   the nearest model size;
//! - FLOPs per token: 6 × parameters (forward + backward, Kaplan et al.
//!   2020), the convention the Megatron table also uses without recompute;
//! - strong scaling: an ASSUMPTION of 3% efficiency lost per doubling of
//!   data-parallel replicas (the Unicron paper: "a few percent per doubling").

use unicron_core::{JobSpec, ThroughputPoint};

/// One model of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Model {
    pub name: &'static str,
    pub parameters: f64,
    /// Tokens per global batch (GPT-3 paper, Table 2.1).
    pub batch_tokens: f64,
    /// Achieved FLOP/s per GPU at the model-parallel size (Megatron table).
    pub gpu_flops: f64,
    /// GPUs of one model replica (tensor × pipeline parallel): the minimum.
    pub replica_gpus: u32,
    /// Throughput kept per doubling of data-parallel replicas.
    pub efficiency: f64,
}

/// Efficiency kept per doubling of data-parallel replicas (assumption).
pub const EFFICIENCY_PER_DOUBLING: f64 = 0.97;

/// The catalogue, smallest first; jobs take models round-robin.
pub const MODELS: [Model; 4] = [
    Model {
        name: "gpt3-1.3b",
        parameters: 1.3e9,
        batch_tokens: 1.0e6,
        gpu_flops: 137e12, // Megatron 1.7B row: 137 TFLOP/s
        replica_gpus: 8,
        efficiency: EFFICIENCY_PER_DOUBLING,
    },
    Model {
        name: "gpt3-2.7b",
        parameters: 2.7e9,
        batch_tokens: 1.0e6,
        gpu_flops: 138e12, // 3.6B row: 138 TFLOP/s
        replica_gpus: 8,
        efficiency: EFFICIENCY_PER_DOUBLING,
    },
    Model {
        name: "gpt3-6.7b",
        parameters: 6.7e9,
        batch_tokens: 2.0e6,
        gpu_flops: 142e12, // 7.5B row: 142 TFLOP/s
        replica_gpus: 8,
        efficiency: EFFICIENCY_PER_DOUBLING,
    },
    Model {
        name: "gpt3-13b",
        parameters: 13.0e9,
        batch_tokens: 2.0e6,
        gpu_flops: 135e12, // 18B row: 135 TFLOP/s
        replica_gpus: 16,
        efficiency: EFFICIENCY_PER_DOUBLING,
    },
];

impl Model {
    /// FLOPs of one training iteration (one global batch).
    pub fn iteration_flops(&self) -> f64 {
        6.0 * self.parameters * self.batch_tokens
    }

    /// Achieved FLOP/s on `gpus` GPUs; zero below one replica.
    pub fn throughput(&self, gpus: u32) -> f64 {
        if gpus < self.replica_gpus {
            return 0.0;
        }
        let replicas = gpus / self.replica_gpus;
        let doublings = f64::from(replicas).log2();
        f64::from(replicas * self.replica_gpus) * self.gpu_flops * self.efficiency.powf(doublings)
    }

    /// Seconds per iteration on `gpus` GPUs.
    pub fn iteration_s(&self, gpus: u32) -> f64 {
        let t = self.throughput(gpus);
        if t > 0.0 {
            self.iteration_flops() / t
        } else {
            f64::INFINITY
        }
    }

    /// The planner's view of a job of this model on up to `max_gpus`.
    pub fn spec(
        &self,
        weight: f64,
        max_gpus: u32,
        node_gpus: u32,
        checkpoint_interval_s: i64,
    ) -> JobSpec {
        // Every node multiple from one replica up, a partial replica adding
        // nothing; the unit tells the planner to allocate whole replicas.
        let step = node_gpus.max(1);
        let first = self.replica_gpus.div_ceil(step);
        let throughput = (first..=max_gpus / step)
            .map(|k| {
                let gpus = k * step;
                ThroughputPoint {
                    gpus: gpus as i32,
                    flops: self.throughput(gpus),
                }
            })
            .collect();
        JobSpec {
            weight,
            min_gpus: self.replica_gpus as i32,
            max_gpus: max_gpus as i32,
            unit_gpus: self.replica_gpus as i32,
            dp_degree: (max_gpus / self.replica_gpus).max(1) as i32,
            checkpoint_interval_s,
            throughput,
        }
    }
}

/// Weights given to jobs in turn (the paper weighs jobs differently).
pub const WEIGHTS: [f64; 3] = [1.0, 2.0, 1.5];

/// The heterogeneous workload: jobs whose minimum size is set by tensor and
/// pipeline parallelism (one replica = TP x PP GPUs), whose data-parallel
/// scaling differs, and whose weights are far apart, so that where a node
/// goes matters. Model sizes follow the GPT-3 family; the per-GPU rates are
/// the Megatron rows above (18B for the larger models), the replica sizes
/// and scaling efficiencies are ASSUMPTIONS in the range public Megatron
/// configurations use (docs/EVALUATION.md). Each entry: model and weight.
pub const HETEROGENEOUS: [(Model, f64); 4] = [
    (
        // Data parallel across nodes scales almost linearly.
        Model {
            name: "gpt3-6.7b-tp8",
            parameters: 6.7e9,
            batch_tokens: 2.0e6,
            gpu_flops: 142e12,
            replica_gpus: 8,
            efficiency: 0.99,
        },
        1.0,
    ),
    (
        Model {
            name: "gpt3-13b-tp8pp2",
            parameters: 13.0e9,
            batch_tokens: 2.0e6,
            gpu_flops: 135e12,
            replica_gpus: 16,
            efficiency: 0.95,
        },
        4.0,
    ),
    (
        // A communication-bound job: each doubling loses a fifth.
        Model {
            name: "gpt3-30b-tp8pp4",
            parameters: 30.0e9,
            batch_tokens: 4.0e6,
            gpu_flops: 135e12,
            replica_gpus: 32,
            efficiency: 0.80,
        },
        0.5,
    ),
    (
        // The flagship: large replicas, heavy weight.
        Model {
            name: "gpt3-175b-tp8pp8",
            parameters: 175.0e9,
            batch_tokens: 4.0e6,
            gpu_flops: 135e12,
            replica_gpus: 64,
            efficiency: 0.97,
        },
        8.0,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_scales_sublinearly_and_is_zero_below_a_replica() {
        let m = MODELS[0];
        assert_eq!(m.throughput(4), 0.0);
        assert_eq!(m.throughput(8), 8.0 * 137e12);
        let two = m.throughput(16);
        assert!((two - 16.0 * 137e12 * 0.97).abs() < 1.0);
        // A 1.3B model on 32 GPUs: about two seconds per 1M-token batch.
        let s = m.iteration_s(32);
        assert!(s > 1.5 && s < 2.5, "{s}");
    }

    #[test]
    fn specs_list_every_node_multiple() {
        let spec = MODELS[3].spec(2.0, 64, 8, 1800);
        let gpus: Vec<i32> = spec.throughput.iter().map(|p| p.gpus).collect();
        assert_eq!(gpus, [16, 24, 32, 40, 48, 56, 64]);
        assert_eq!(spec.throughput[1].flops, spec.throughput[0].flops);
        assert_eq!((spec.min_gpus, spec.dp_degree, spec.unit_gpus), (16, 4, 16));
    }
}
