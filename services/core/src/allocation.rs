//! Plan generation after the Unicron paper's cost model (docs/design.md §7):
//! choose GPUs per job to maximise Σ G(t, x_t) subject to Σ x_t ≤ healthy
//! GPUs, by the dynamic programme S[i][j] = max_k S[i−1][j−k] + G(t_i, k)
//! over allocation units.

use serde::{Deserialize, Serialize};

/// A job's measured throughput profile T(x): achieved FLOP/s at x GPUs.
///
/// T is piecewise linear through the points, 0 below the first point, and
/// flat after the last one: throughput that was never measured is not
/// assumed, so the planner gains nothing by giving a job more GPUs than its
/// largest measured size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    points: Vec<(u32, f64)>,
}

/// Why a profile or problem is not usable; `field` names the culprit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidInput {
    pub field: String,
    pub reason: String,
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> InvalidInput {
    InvalidInput {
        field: field.into(),
        reason: reason.into(),
    }
}

impl Profile {
    /// Checks the points: at least one, GPU counts positive and strictly
    /// increasing, FLOP/s finite and not negative. `field` prefixes errors.
    pub fn new(points: Vec<(u32, f64)>, field: &str) -> Result<Profile, InvalidInput> {
        if points.is_empty() {
            return Err(invalid(field, "needs at least one point"));
        }
        for (i, &(gpus, flops)) in points.iter().enumerate() {
            if gpus == 0 {
                return Err(invalid(
                    format!("{field}[{i}]"),
                    "GPU count must be positive",
                ));
            }
            if !flops.is_finite() || flops < 0.0 {
                return Err(invalid(
                    format!("{field}[{i}]"),
                    format!("FLOP/s {flops} is not a finite, non-negative number"),
                ));
            }
            if i > 0 && gpus <= points[i - 1].0 {
                return Err(invalid(
                    format!("{field}[{i}]"),
                    format!(
                        "GPU counts must increase ({} after {})",
                        gpus,
                        points[i - 1].0
                    ),
                ));
            }
        }
        Ok(Profile { points })
    }

    pub fn points(&self) -> &[(u32, f64)] {
        &self.points
    }

    /// T(x). The segment is found by binary search (the first point at or
    /// above x), so a long profile costs log(points) per evaluation.
    pub fn throughput(&self, gpus: u32) -> f64 {
        let first = self.points[0];
        if gpus < first.0 {
            return 0.0;
        }
        let above = 1 + self.points[1..].partition_point(|&(x, _)| x < gpus);
        match self.points.get(above) {
            Some(&(x1, y1)) => {
                let (x0, y0) = self.points[above - 1];
                let t = f64::from(gpus - x0) / f64::from(x1 - x0);
                y0 + t * (y1 - y0)
            }
            None => self.points[self.points.len() - 1].1,
        }
    }
}

/// One job as the planner sees it when re-planning.
#[derive(Debug, Clone, PartialEq)]
pub struct JobDemand {
    pub id: String,
    /// w(t), the job's priority weight.
    pub weight: f64,
    pub min_gpus: u32,
    pub max_gpus: u32,
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
    /// F(t, x) = w · T(x) if x ≥ min, else 0.
    pub fn useful_flops(&self, gpus: u32) -> f64 {
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

    /// How many sizes [`JobDemand::options`] gives, without listing them.
    fn option_count(&self, unit: u32, units: u32) -> u64 {
        let unit = u64::from(unit.max(1));
        let lowest = u64::from(self.min_gpus).div_ceil(unit).max(1);
        let highest = (u64::from(self.max_gpus) / unit).min(u64::from(units));
        1 + (highest + 1).saturating_sub(lowest)
    }

    /// Sizes the job may get in units of `unit` GPUs: 0, and every multiple
    /// of `unit` in [min, max]. The current size comes first so that it wins
    /// ties (no move without a gain).
    fn options(&self, unit: u32, units: u32) -> Vec<u32> {
        let mut sizes: Vec<u32> = (1..=units)
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
        for (i, job) in self.jobs.iter().enumerate() {
            let options: Vec<(u32, f64)> = job
                .options(self.unit, units)
                .into_iter()
                .map(|k| (k, job.reward(k * self.unit, self.running_s)))
                .collect();
            let mut next = vec![f64::NEG_INFINITY; width];
            for j in 0..width {
                let row = &mut choice[i * width..(i + 1) * width];
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
            current_gpus: current,
            hit: false,
            transition_s: 600.0,
            profile: Profile::new(points.to_vec(), "throughput").unwrap(),
        }
    }

    #[test]
    fn profile_is_piecewise_linear_zero_below_flat_above() {
        let p = Profile::new(vec![(16, 2.0), (32, 4.0), (64, 6.0)], "t").unwrap();
        assert_eq!(p.throughput(8), 0.0);
        assert_eq!(p.throughput(16), 2.0);
        assert_eq!(p.throughput(24), 3.0);
        assert_eq!(p.throughput(48), 5.0);
        assert_eq!(p.throughput(128), 6.0);
    }

    #[test]
    fn bad_profiles_name_the_point() {
        let err = Profile::new(vec![(16, 2.0), (8, 4.0)], "jobs[0].throughput").unwrap_err();
        assert_eq!(err.field, "jobs[0].throughput[1]");
        let err = Profile::new(vec![(16, f64::NAN)], "t").unwrap_err();
        assert_eq!(err.field, "t[0]");
        assert!(Profile::new(vec![], "t").is_err());
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
        )
            .prop_map(
                move |(min_units, extra, current_units, hit, transition_s, weight, rates)| {
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

    /// Every feasible allocation, enumerated.
    fn brute_force(problem: &Problem) -> f64 {
        let units = problem.gpus / problem.unit;
        let options: Vec<Vec<u32>> = problem
            .jobs
            .iter()
            .map(|j| {
                j.options(problem.unit, units)
                    .into_iter()
                    .map(|k| k * problem.unit)
                    .collect()
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
            }
            // Same input, same answer.
            prop_assert_eq!(problem.solve(), dp);
        }
    }
}

/// `unicron plan --input FILE`: one allocation problem as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    pub gpus: i64,
    pub unit: i64,
    pub d_running_s: f64,
    pub jobs: Vec<PlanRequestJob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequestJob {
    pub id: String,
    #[serde(default = "one")]
    pub weight: f64,
    pub min_gpus: i64,
    pub max_gpus: i64,
    #[serde(default)]
    pub current_gpus: i64,
    #[serde(default)]
    pub hit: bool,
    pub d_transition_s: f64,
    /// `[[gpus, flops], ...]`, sorted by gpus.
    pub throughput: Vec<(i64, f64)>,
}

fn one() -> f64 {
    1.0
}

/// `unicron plan`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanResponse {
    pub allocation: std::collections::BTreeMap<String, u32>,
    pub waf: f64,
    pub objective: f64,
}

fn gpu_count(value: i64, field: String) -> Result<u32, InvalidInput> {
    u32::try_from(value).map_err(|_| {
        invalid(
            field,
            format!("{value} is not a GPU count (0 to 4294967295)"),
        )
    })
}

/// Limits of `unicron plan`'s input (docs/planner.md). The DP keeps a
/// choice table of jobs × (units + 1) cells and takes (units + 1) steps per
/// size it tries for each job, so a request of a few bytes (`gpus` 1e9,
/// `unit` 1) would ask for gigabytes and hours; these keep one request to
/// 64 MiB of table and about a second of work.
pub const MAX_PLAN_JOBS: usize = 4096;
/// Allocation units: `gpus / unit`.
pub const MAX_PLAN_UNITS: u32 = 1 << 16;
/// Measured points of one job's throughput profile.
pub const MAX_PLAN_POINTS: usize = 1024;
/// Cells of the DP's choice table (4 bytes each).
pub const MAX_PLAN_CELLS: u64 = 1 << 24;
/// Steps of the DP's inner loop.
pub const MAX_PLAN_STEPS: u64 = 1 << 30;

impl PlanRequest {
    /// Checks every field and builds the problem; errors name the field.
    pub fn to_problem(&self) -> Result<Problem, InvalidInput> {
        if self.jobs.len() > MAX_PLAN_JOBS {
            return Err(invalid(
                "jobs",
                format!("{} jobs; at most {MAX_PLAN_JOBS}", self.jobs.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for (i, job) in self.jobs.iter().enumerate() {
            let field = |name: &str| format!("jobs[{i}].{name}");
            if !seen.insert(job.id.as_str()) {
                return Err(invalid(field("id"), format!("`{}` appears twice", job.id)));
            }
            if job.throughput.len() > MAX_PLAN_POINTS {
                return Err(invalid(
                    field("throughput"),
                    format!("{} points; at most {MAX_PLAN_POINTS}", job.throughput.len()),
                ));
            }
            let points = job
                .throughput
                .iter()
                .enumerate()
                .map(|(p, &(gpus, flops))| {
                    Ok((
                        gpu_count(gpus, format!("{}[{p}]", field("throughput")))?,
                        flops,
                    ))
                })
                .collect::<Result<Vec<_>, InvalidInput>>()?;
            jobs.push(JobDemand {
                id: job.id.clone(),
                weight: job.weight,
                min_gpus: gpu_count(job.min_gpus, field("min_gpus"))?,
                max_gpus: gpu_count(job.max_gpus, field("max_gpus"))?,
                current_gpus: gpu_count(job.current_gpus, field("current_gpus"))?,
                hit: job.hit,
                transition_s: job.d_transition_s,
                profile: Profile::new(points, &field("throughput"))?,
            });
        }
        let problem = Problem {
            gpus: gpu_count(self.gpus, "gpus".into())?,
            unit: gpu_count(self.unit, "unit".into())?,
            running_s: self.d_running_s,
            jobs,
        };
        problem.validate()?;
        let units = problem.gpus / problem.unit;
        if units > MAX_PLAN_UNITS {
            return Err(invalid(
                "unit",
                format!(
                    "{} GPUs in units of {} are {units} allocation units; at most {MAX_PLAN_UNITS} (use a larger unit)",
                    problem.gpus, problem.unit
                ),
            ));
        }
        let (cells, steps) = problem.dp_size();
        if cells > MAX_PLAN_CELLS || steps > MAX_PLAN_STEPS {
            return Err(invalid(
                "jobs",
                format!(
                    "{} jobs over {units} allocation units need {cells} table cells and {steps} steps; at most {MAX_PLAN_CELLS} and {MAX_PLAN_STEPS} (use a larger unit, fewer jobs or narrower min_gpus..max_gpus)",
                    problem.jobs.len()
                ),
            ));
        }
        // Rewards must add up without overflowing: each job's |G| is at most
        // w · max T · (D_running + D_transition).
        let share = f64::MAX / (problem.jobs.len() as f64 + 1.0);
        for (i, job) in problem.jobs.iter().enumerate() {
            let peak = job.profile.points().iter().map(|p| p.1).fold(0.0, f64::max);
            let bound = job.weight * peak * (problem.running_s + job.transition_s);
            if !bound.is_finite() || bound > share {
                return Err(invalid(
                    format!("jobs[{i}]"),
                    "weight × FLOP/s × (d_running_s + d_transition_s) is too large to add up",
                ));
            }
        }
        Ok(problem)
    }
}

impl Problem {
    /// Solves and reports by job id.
    pub fn respond(&self) -> PlanResponse {
        let best = self.solve();
        PlanResponse {
            allocation: self
                .jobs
                .iter()
                .zip(&best.gpus)
                .map(|(j, &g)| (j.id.clone(), g))
                .collect(),
            waf: best.waf,
            objective: best.objective,
        }
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;

    fn request(text: &str) -> Result<Problem, InvalidInput> {
        serde_json::from_str::<PlanRequest>(text)
            .unwrap()
            .to_problem()
    }

    #[test]
    fn the_issue_example_solves() {
        let problem = request(
            r#"{"gpus": 128, "unit": 8, "d_running_s": 86400,
                "jobs": [{"id": "gpt-13b", "weight": 1.0, "min_gpus": 16, "max_gpus": 128, "current_gpus": 64,
                          "hit": false, "d_transition_s": 600,
                          "throughput": [[16, 2.1e15], [32, 4.0e15], [64, 7.6e15], [128, 14.1e15]]}]}"#,
        )
        .unwrap();
        let response = problem.respond();
        assert_eq!(response.allocation["gpt-13b"], 128);
        assert!((response.waf - 14.1e15).abs() < 1.0);
    }

    #[test]
    fn bad_fields_are_named() {
        let base = r#"{"gpus": 128, "unit": 8, "d_running_s": 86400, "jobs": [{"id": "a", "min_gpus": MIN, "max_gpus": 64, "d_transition_s": 600, "throughput": POINTS}]}"#;
        let case = |min: &str, points: &str| {
            request(&base.replace("MIN", min).replace("POINTS", points))
                .unwrap_err()
                .field
        };
        assert_eq!(case("-8", "[[8, 1.0]]"), "jobs[0].min_gpus");
        assert_eq!(case("8", "[[16, 1.0], [8, 2.0]]"), "jobs[0].throughput[1]");
        assert_eq!(case("8", "[[-16, 1.0]]"), "jobs[0].throughput[0]");
        assert_eq!(case("80", "[[8, 1.0]]"), "jobs[0].min_gpus");
        let err = request(r#"{"gpus": -1, "unit": 8, "d_running_s": 1, "jobs": []}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "gpus: -1 is not a GPU count (0 to 4294967295)"
        );
    }

    /// Issue 8: this request made the DP allocate 8 GB for its first row
    /// (and would then have run for hours with a job in it).
    #[test]
    fn absurd_sizes_are_refused_before_the_dp_allocates() {
        let err = request(r#"{"gpus": 1000000000, "unit": 1, "d_running_s": 0, "jobs": []}"#)
            .unwrap_err();
        assert_eq!(err.field, "unit");
        assert!(
            err.reason
                .contains("1000000000 allocation units; at most 65536"),
            "{err}"
        );
        // Within the unit limit, but a table of jobs × units too large.
        let jobs: Vec<String> = (0..300)
            .map(|i| format!(r#"{{"id": "j{i}", "min_gpus": 0, "max_gpus": 0, "d_transition_s": 0, "throughput": [[1, 1.0]]}}"#))
            .collect();
        let text = format!(
            r#"{{"gpus": 65536, "unit": 1, "d_running_s": 1, "jobs": [{}]}}"#,
            jobs.join(",")
        );
        assert_eq!(request(&text).unwrap_err().field, "jobs");
        // Each job may be any size: few cells, too many steps.
        let text = r#"{"gpus": 65536, "unit": 1, "d_running_s": 1, "jobs": [{"id": "a", "min_gpus": 0, "max_gpus": 65536, "d_transition_s": 0, "throughput": [[1, 1.0]]}]}"#;
        let err = request(text).unwrap_err();
        assert!(err.reason.contains("4295098369 steps"), "{err}");
        let err = request(
            r#"{"gpus": 8, "unit": 8, "d_running_s": 1e300, "jobs": [{"id": "a", "weight": 1e10, "min_gpus": 8, "max_gpus": 8, "d_transition_s": 0, "throughput": [[8, 1e10]]}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.field, "jobs[0]");
    }

    #[test]
    fn option_count_counts_the_options() {
        for unit in 1..=9 {
            for units in 0..=6 {
                for min in 0..=20 {
                    for max in min..=24 {
                        let mut j = job_with(min, max);
                        j.current_gpus = (min + max) / 2;
                        assert_eq!(
                            j.option_count(unit, units),
                            j.options(unit, units).len() as u64,
                            "unit {unit} units {units} min {min} max {max}"
                        );
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
            current_gpus: 0,
            hit: false,
            transition_s: 0.0,
            profile: Profile::new(vec![(1, 1.0)], "t").unwrap(),
        }
    }

    /// The binary search picks the same segment as the scan it replaced.
    #[test]
    fn throughput_matches_a_linear_scan() {
        let points: Vec<(u32, f64)> = (1..40)
            .map(|i| (i * 3 + i % 2, (i as f64).sqrt() * 1e15 / 7.0))
            .collect();
        let profile = Profile::new(points.clone(), "t").unwrap();
        let scan = |gpus: u32| -> f64 {
            if gpus < points[0].0 {
                return 0.0;
            }
            for pair in points.windows(2) {
                let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
                if gpus <= x1 {
                    let t = f64::from(gpus - x0) / f64::from(x1 - x0);
                    return y0 + t * (y1 - y0);
                }
            }
            points[points.len() - 1].1
        };
        for gpus in 0..150 {
            assert_eq!(
                profile.throughput(gpus).to_bits(),
                scan(gpus).to_bits(),
                "{gpus}"
            );
        }
    }
}
