//! `unicron plan`'s input and output: one allocation problem as JSON, its
//! limits, and the answer by job id.

use serde::{Deserialize, Serialize};

use super::{InvalidInput, JobDemand, Problem, Profile, invalid};

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
    /// The job's own unit (one replica); 0: any multiple of `unit`.
    #[serde(default)]
    pub unit_gpus: i64,
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
                unit_gpus: gpu_count(job.unit_gpus, field("unit_gpus"))?,
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

    /// A fuzz find: this request made the DP allocate 8 GB for its first row
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
}
