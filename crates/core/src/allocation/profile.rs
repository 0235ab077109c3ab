//! A job's measured throughput profile T(x).

use serde::{Deserialize, Serialize};

use super::{InvalidInput, invalid};

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

impl Profile {
    /// A job that gains nothing from any GPU count (a spec that cannot be
    /// planned with is planned as this, not trusted).
    pub fn zero() -> Profile {
        Profile {
            points: vec![(1, 0.0)],
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

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
