//! The allocation problem and the dynamic programme that solves it.

use super::{InvalidInput, Profile, invalid};

/// One job as the planner sees it when re-planning.
#[derive(Debug, Clone, PartialEq)]
pub struct JobDemand {
    pub id: String,
    /// w(t), the job's priority weight.
    pub weight: f64,
    pub min_gpus: u32,
    pub max_gpus: u32,
    /// The job's own unit (one model replica: tensor × pipeline parallel
    /// GPUs): it runs on whole multiples of it, and GPUs past the last
    /// whole one compute nothing. 0 or 1: any size.
    pub unit_gpus: u32,
    /// x_old: what it runs on now (0 if not running).
    pub current_gpus: u32,
    /// Hit by the failure being handled: it pays a transition even if its
    /// size does not change.
    pub hit: bool,
    /// D_transition for this job, seconds.
    pub transition_s: f64,
    pub profile: Profile,
}

impl JobDemand {
    /// The GPUs of `gpus` that do work: whole units only. A job left with
    /// part of a replica (it lost a node of a multi-node replica) runs
    /// without it.
    pub fn working_gpus(&self, gpus: u32) -> u32 {
        match self.unit_gpus {
            0 | 1 => gpus,
            unit => gpus - gpus % unit,
        }
    }

    /// F(t, x) = w · T(x) if x ≥ min, else 0, x counted in whole units.
    pub fn useful_flops(&self, gpus: u32) -> f64 {
        let gpus = self.working_gpus(gpus);
        if gpus == 0 || gpus < self.min_gpus {
            0.0
        } else {
            self.weight * self.profile.throughput(gpus)
        }
    }

    /// G(t, x) = F(x)·D_running − [x ≠ x_old or hit]·F(x_old)·D_transition.
    pub fn reward(&self, gpus: u32, running_s: f64) -> f64 {
        let gain = self.useful_flops(gpus) * running_s;
        if gpus != self.current_gpus || self.hit {
            gain - self.useful_flops(self.current_gpus) * self.transition_s
        } else {
            gain
        }
    }

    /// Allocation units (of `unit` GPUs) that hold a whole number of the
    /// job's own units: sizes are multiples of this.
    fn step_units(&self, unit: u32) -> u64 {
        let unit = u64::from(unit.max(1));
        let own = u64::from(self.unit_gpus.max(1));
        own / gcd(unit, own)
    }

    /// How many sizes [`JobDemand::options`] gives, without listing them.
    fn option_count(&self, unit: u32, units: u32) -> u64 {
        let step = self.step_units(unit);
        let unit = u64::from(unit.max(1));
        let lowest = u64::from(self.min_gpus).div_ceil(unit).max(1);
        let highest = (u64::from(self.max_gpus) / unit).min(u64::from(units));
        1 + (highest / step).saturating_sub((lowest - 1) / step)
    }

    /// Sizes the job may get in units of `unit` GPUs: 0, and every multiple
    /// of `unit` in [min, max] that is whole units of the job's own (a
    /// partial replica would hold GPUs that compute nothing). The current
    /// size comes first so that it wins ties (no move without a gain).
    fn options(&self, unit: u32, units: u32) -> Vec<u32> {
        let step = self.step_units(unit);
        let mut sizes: Vec<u32> = (1..=units)
            .filter(|k| u64::from(*k) % step == 0)
            .filter(|k| (self.min_gpus..=self.max_gpus).contains(&(k * unit)))
            .collect();
        sizes.insert(0, 0);
        if let Some(at) = sizes.iter().position(|k| k * unit == self.current_gpus) {
            let current = sizes.remove(at);
            sizes.insert(0, current);
        }
        sizes
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// One allocation problem: healthy GPUs, the unit, D_running, the jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub gpus: u32,
    pub unit: u32,
    /// D_running: expected time until the next reconfiguration, seconds.
    pub running_s: f64,
    pub jobs: Vec<JobDemand>,
}

/// The chosen GPUs per job (in `Problem::jobs` order) and their value.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub gpus: Vec<u32>,
    /// Σ F(t, x_t): weighted achieved aggregate FLOP/s.
    pub waf: f64,
    /// Σ G(t, x_t).
    pub objective: f64,
}

impl Problem {
    /// Checks what the DP relies on; errors name the field.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        if self.unit == 0 {
            return Err(invalid("unit", "must be positive"));
        }
        if !self.running_s.is_finite() || self.running_s < 0.0 {
            return Err(invalid(
                "d_running_s",
                "must be a finite, non-negative number",
            ));
        }
        for (i, job) in self.jobs.iter().enumerate() {
            let field = |name: &str| format!("jobs[{i}].{name}");
            if !job.weight.is_finite() || job.weight < 0.0 {
                return Err(invalid(
                    field("weight"),
                    "must be a finite, non-negative number",
                ));
            }
            if job.min_gpus > job.max_gpus {
                return Err(invalid(
                    field("min_gpus"),
                    format!("{} exceeds max_gpus {}", job.min_gpus, job.max_gpus),
                ));
            }
            if !job.transition_s.is_finite() || job.transition_s < 0.0 {
                return Err(invalid(
                    field("d_transition_s"),
                    "must be a finite, non-negative number",
                ));
            }
        }
        Ok(())
    }

    /// The size of [`Problem::solve`]'s work: cells of its choice table
    /// (jobs × (units + 1)) and steps of its inner loop ((units + 1) × the
    /// sizes tried, summed over jobs).
    pub fn dp_size(&self) -> (u64, u64) {
        let units = self.gpus / self.unit.max(1);
        let width = u64::from(units) + 1;
        let sizes: u64 = self
            .jobs
            .iter()
            .map(|j| j.option_count(self.unit, units))
            .sum();
        (width * self.jobs.len() as u64, width.saturating_mul(sizes))
    }

    /// Value of a given allocation.
    pub fn evaluate(&self, gpus: &[u32]) -> Allocation {
        let waf = self
            .jobs
            .iter()
            .zip(gpus)
            .map(|(j, &x)| j.useful_flops(x))
            .sum();
        let objective = self
            .jobs
            .iter()
            .zip(gpus)
            .map(|(j, &x)| j.reward(x, self.running_s))
            .sum();
        Allocation {
            gpus: gpus.to_vec(),
            waf,
            objective,
        }
    }

    /// The allocation maximising Σ G, by dynamic programming over units:
    /// O(m · n²) for m jobs and n units. Deterministic: options are tried in
    /// a fixed order and only a strictly better value replaces a choice.
    pub fn solve(&self) -> Allocation {
        let units = self.gpus / self.unit.max(1);
        let width = units as usize + 1;
        // best[j]: best Σ G of the jobs so far using at most j units.
        let mut best = vec![0.0_f64; width];
        let mut choice = vec![0u32; self.jobs.len() * width];
        // Units the jobs so far can use at most: beyond that every budget
        // has the same best value and the same choice (every option looks
        // back into the flat part of `best`), so it is copied, not searched.
        let mut reach = 0usize;
        for (i, job) in self.jobs.iter().enumerate() {
            let options: Vec<(u32, f64)> = job
                .options(self.unit, units)
                .into_iter()
                .map(|k| (k, job.reward(k * self.unit, self.running_s)))
                .collect();
            let largest = options.iter().map(|(k, _)| *k as usize).max().unwrap_or(0);
            reach = (reach + largest).min(width - 1);
            let mut next = vec![f64::NEG_INFINITY; width];
            let row = &mut choice[i * width..(i + 1) * width];
            for j in 0..=reach {
                for &(k, reward) in &options {
                    let k_us = k as usize;
                    if k_us > j {
                        continue;
                    }
                    let value = best[j - k_us] + reward;
                    if value > next[j] {
                        next[j] = value;
                        row[j] = k;
                    }
                }
            }
            for j in reach + 1..width {
                next[j] = next[reach];
                row[j] = row[reach];
            }
            best = next;
        }
        let mut gpus = vec![0u32; self.jobs.len()];
        let mut j = units as usize;
        for i in (0..self.jobs.len()).rev() {
            let k = choice[i * width + j];
            gpus[i] = k * self.unit;
            j -= k as usize;
        }
        self.evaluate(&gpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, min: u32, max: u32, current: u32, points: &[(u32, f64)]) -> JobDemand {
        JobDemand {
            id: id.into(),
            weight: 1.0,
            min_gpus: min,
            max_gpus: max,
            unit_gpus: 0,
            current_gpus: current,
            hit: false,
            transition_s: 600.0,
            profile: Profile::new(points.to_vec(), "throughput").unwrap(),
        }
    }

    /// A job of 64-GPU replicas (eight 8-GPU nodes each) measured at whole
    /// replicas only, where interpolating would credit a partial one.
    fn flagship(weight: f64, current: u32) -> JobDemand {
        JobDemand {
            weight,
            unit_gpus: 64,
            ..job("flagship", 64, 128, current, &[(64, 64.0), (128, 124.0)])
        }
    }

    #[test]
    fn a_partial_replica_computes_nothing() {
        let j = flagship(8.0, 128);
        assert_eq!(j.working_gpus(120), 64);
        assert_eq!(j.useful_flops(120), 8.0 * 64.0);
        assert_eq!(j.useful_flops(56), 0.0);
        assert_eq!(j.useful_flops(128), 8.0 * 124.0);
        // Without a unit every GPU counts, as before.
        let any = JobDemand {
            unit_gpus: 0,
            ..j.clone()
        };
        assert_eq!(any.useful_flops(120), 8.0 * 116.5);
    }

    #[test]
    fn only_whole_replicas_are_offered() {
        let mut j = flagship(8.0, 120);
        assert_eq!(j.options(8, 16), vec![0, 8, 16]);
        // Units of 12 GPUs on 8-GPU nodes: every third node completes two.
        j.unit_gpus = 12;
        j.min_gpus = 12;
        assert_eq!(j.options(8, 10), vec![0, 3, 6, 9]);
    }

    /// The flagship lost a node: 120 GPUs left with 8 spare. It keeps both
    /// replicas by taking a node from the light job when its weight says
    /// so, and drops to one whole replica (not 120) when it does not.
    #[test]
    fn the_heavy_job_keeps_whole_replicas_when_the_waf_says_so() {
        let light = job("light", 8, 32, 32, &[(8, 8.0), (32, 31.0)]);
        let mut problem = Problem {
            gpus: 152,
            unit: 8,
            running_s: 3_600.0,
            jobs: vec![
                JobDemand {
                    hit: true,
                    ..flagship(8.0, 120)
                },
                light.clone(),
            ],
        };
        let best = problem.solve();
        assert_eq!(best.gpus, vec![128, 24]);
        assert_eq!(best.waf, 8.0 * 124.0 + light.useful_flops(24));

        // A flagship worth less than the light job's node: one replica,
        // and the 56 GPUs of the broken one are not held.
        problem.jobs[0].weight = 0.01;
        let best = problem.solve();
        assert_eq!(best.gpus, vec![64, 32]);
        assert_eq!(best.waf, 0.01 * 64.0 + 31.0);
    }

    #[test]
    fn the_value_of_a_partial_replica_is_its_whole_part() {
        // Keeping the flagship at 120 GPUs is worth one replica, and the
        // transition it pays is charged on that.
        let problem = Problem {
            gpus: 120,
            unit: 8,
            running_s: 1_000.0,
            jobs: vec![flagship(8.0, 120)],
        };
        let keep = problem.evaluate(&[120]);
        assert_eq!(keep.waf, 8.0 * 64.0);
        let best = problem.solve();
        assert_eq!(best.gpus, vec![64]);
        assert_eq!(best.waf, keep.waf);
        assert_eq!(best.objective, 8.0 * 64.0 * 1_000.0 - 8.0 * 64.0 * 600.0);
    }

    #[test]
    fn capacity_goes_to_the_job_that_gains_most() {
        // a scales linearly, b is flat after 8 GPUs: the spare 8 go to a.
        let problem = Problem {
            gpus: 32,
            unit: 8,
            running_s: 86_400.0,
            jobs: vec![
                job("a", 8, 32, 16, &[(8, 1.0), (32, 4.0)]),
                job("b", 8, 32, 8, &[(8, 1.0), (32, 1.1)]),
            ],
        };
        let best = problem.solve();
        assert_eq!(best.gpus, vec![24, 8]);
        assert!((best.waf - 4.0).abs() < 1e-9);
    }

    #[test]
    fn no_move_without_gain() {
        let problem = Problem {
            gpus: 16,
            unit: 8,
            running_s: 100.0,
            jobs: vec![
                job("a", 8, 16, 8, &[(8, 1.0), (16, 1.0)]),
                job("b", 8, 16, 8, &[(8, 1.0), (16, 1.0)]),
            ],
        };
        assert_eq!(problem.solve().gpus, vec![8, 8]);
    }

    #[test]
    fn short_running_time_keeps_the_current_plan() {
        // Growing a to 16 doubles its rate but costs a transition that
        // only pays off if the plan runs longer than D_transition.
        let mut problem = Problem {
            gpus: 16,
            unit: 8,
            running_s: 100.0,
            jobs: vec![job("a", 8, 16, 8, &[(8, 1.0), (16, 2.0)])],
        };
        assert_eq!(problem.solve().gpus, vec![8]);
        problem.running_s = 10_000.0;
        assert_eq!(problem.solve().gpus, vec![16]);
    }

    #[test]
    fn minimums_are_respected() {
        let problem = Problem {
            gpus: 24,
            unit: 8,
            running_s: 1000.0,
            jobs: vec![
                job("big", 32, 64, 0, &[(32, 10.0)]),
                job("small", 8, 8, 0, &[(8, 1.0)]),
            ],
        };
        assert_eq!(problem.solve().gpus, vec![0, 8]);
    }

    #[test]
    fn option_count_counts_the_options() {
        for unit in 1..=9 {
            for units in 0..=6 {
                for min in 0..=20 {
                    for max in min..=24 {
                        for own in [0, 1, 4, 8, 12, 16, 64] {
                            let mut j = job_with(min, max);
                            j.current_gpus = (min + max) / 2;
                            j.unit_gpus = own;
                            assert_eq!(
                                j.option_count(unit, units),
                                j.options(unit, units).len() as u64,
                                "unit {unit} units {units} min {min} max {max} own {own}"
                            );
                        }
                    }
                }
            }
        }
    }

    fn job_with(min: u32, max: u32) -> JobDemand {
        JobDemand {
            id: "a".into(),
            weight: 1.0,
            min_gpus: min,
            max_gpus: max,
            unit_gpus: 0,
            current_gpus: 0,
            hit: false,
            transition_s: 0.0,
            profile: Profile::new(vec![(1, 1.0)], "t").unwrap(),
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_job(index: usize) -> impl Strategy<Value = JobDemand> {
        (
            1u32..=4,
            0u32..=3,
            0u32..=6,
            any::<bool>(),
            0.0f64..2000.0,
            0.1f64..3.0,
            proptest::collection::vec(0.0f64..100.0, 1..4),
            prop_oneof![Just(0u32), Just(8), Just(12), Just(16), Just(24)],
        )
            .prop_map(
                move |(min_units, extra, current_units, hit, transition_s, weight, rates, own)| {
                    let unit = 8;
                    let min = min_units * unit - 4; // not always a multiple of the unit
                    let max = (min_units + extra) * unit;
                    let mut flops = 0.0;
                    let points = rates
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            flops += r;
                            (min + 8 * i as u32, flops)
                        })
                        .collect();
                    JobDemand {
                        id: format!("j{index}"),
                        weight,
                        min_gpus: min,
                        max_gpus: max,
                        unit_gpus: own,
                        current_gpus: current_units * unit,
                        hit,
                        transition_s,
                        profile: Profile::new(points, "t").unwrap(),
                    }
                },
            )
    }

    fn arb_problem() -> impl Strategy<Value = Problem> {
        (1usize..=4, 0u32..=8, 0.0f64..20_000.0).prop_flat_map(|(m, units, running_s)| {
            let jobs: Vec<_> = (0..m).map(arb_job).collect();
            jobs.prop_map(move |jobs| Problem {
                gpus: units * 8 + 3,
                unit: 8,
                running_s,
                jobs,
            })
        })
    }

    /// Every feasible allocation, enumerated: 0, or whole nodes within
    /// [min, max] that are whole units of the job's own.
    fn brute_force(problem: &Problem) -> f64 {
        let units = problem.gpus / problem.unit;
        let options: Vec<Vec<u32>> = problem
            .jobs
            .iter()
            .map(|j| {
                let sizes = (1..=units).map(|k| k * problem.unit).filter(|x| {
                    (j.min_gpus..=j.max_gpus).contains(x)
                        && (j.unit_gpus <= 1 || x % j.unit_gpus == 0)
                });
                std::iter::once(0).chain(sizes).collect()
            })
            .collect();
        let mut best = f64::NEG_INFINITY;
        let mut pick = vec![0usize; options.len()];
        loop {
            let gpus: Vec<u32> = pick.iter().zip(&options).map(|(&p, o)| o[p]).collect();
            if gpus.iter().sum::<u32>() <= problem.gpus {
                best = best.max(problem.evaluate(&gpus).objective);
            }
            let mut i = 0;
            loop {
                if i == pick.len() {
                    return best;
                }
                pick[i] += 1;
                if pick[i] < options[i].len() {
                    break;
                }
                pick[i] = 0;
                i += 1;
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn dp_matches_brute_force_and_respects_constraints(problem in arb_problem()) {
            let dp = problem.solve();
            let brute = brute_force(&problem);
            let tolerance = 1e-9 * brute.abs().max(1.0);
            prop_assert!((dp.objective - brute).abs() <= tolerance, "dp {} brute {}", dp.objective, brute);
            prop_assert!(dp.gpus.iter().sum::<u32>() <= problem.gpus);
            for (x, job) in dp.gpus.iter().zip(&problem.jobs) {
                prop_assert!(*x == 0 || (*x >= job.min_gpus && *x <= job.max_gpus && x % problem.unit == 0));
                // Whole replicas only: no GPU is held that computes nothing.
                prop_assert_eq!(job.working_gpus(*x), *x);
            }
            // Same input, same answer.
            prop_assert_eq!(problem.solve(), dp);
        }
    }
}
