//! The Markdown tables `unicron evaluate` prints.

use std::fmt::Write;

use super::running::mean;
use super::{Evaluation, Failures, Scenario, policies};
use crate::real_trace::Reading;

/// The table `unicron evaluate` prints (Markdown, so it goes into the docs
/// as it is): per policy its WAF, spread and downtime, and unicron's ratio
/// over it with the range over seeds.
pub fn table(e: &Evaluation) -> String {
    let mut out = String::new();
    let s = &e.scenario;
    let _ = writeln!(
        out,
        "scenario `{}`: {} GPUs, {} jobs, {} h, {}a failure every {:.0} min on average ({}x the paper setting's rate; {} in the seeds' traces), collective timeout {:.0} min, repair {}, unicron's costs x{}, {} seed(s)\n",
        s.name,
        s.nodes * 8,
        s.jobs,
        s.hours,
        match s.failures {
            Failures::Drawn => String::new(),
            Failures::InfiniteHbd(reading) => format!(
                "failures from the InfiniteHBD trace ({}), ",
                match reading {
                    Reading::EveryFaultHitsAJob => "every fault hits a job",
                    Reading::ChecksFindTheirOwn => "faults found by checks hit no job",
                }
            ),
        },
        s.mtbf_s / 60.0,
        // A real trace's node faults come far more rarely.
        if s.rate < 0.1 {
            format!("{:.4}", s.rate)
        } else {
            crate::truth::rate_multiple(s.rate)
        },
        e.trace_lengths
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        s.collective_timeout_s / 60.0,
        match s.failures {
            Failures::Drawn => format!("{:.1} h", s.repair_s / 3_600.0),
            Failures::InfiniteHbd(_) => "the trace's".into(),
        },
        s.unicron_cost_factor,
        e.seeds
    );
    let _ = writeln!(
        out,
        "| policy | WAF of ideal | spread (σ) | downtime (job-h) | failures that hit a job | unicron's WAF over it (range over seeds) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    let unicron = e.policies.get("unicron");
    for policy in policies(s) {
        let n = policy.name;
        if let Some(why) = e.not_run.get(n) {
            let _ = writeln!(out, "| {n} | not run: {why} | | | | |");
            continue;
        }
        let Some(r) = e.policies.get(n) else {
            continue;
        };
        let hits = mean(&r.runs.iter().map(|x| x.failures as f64).collect::<Vec<_>>());
        let versus = match unicron.and_then(|u| Some((u.ratio.get(n)?, u.ratio_range.get(n)?))) {
            Some((x, (lo, hi))) => format!("{x:.2}x ({lo:.2}-{hi:.2})"),
            None => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {n} | {:.1}% | {:.1}% | {:.1} | {hits:.0} | {versus} |",
            r.waf_fraction * 100.0,
            r.waf_fraction_std * 100.0,
            r.downtime_h,
        );
    }
    out
}

/// Mean downtime per failure that hit a job, minutes, by kind or a real
/// trace's category (rows) and policy (columns): from the injection until
/// the job ran again.
pub fn downtime_table(e: &Evaluation) -> String {
    let names: Vec<&str> = policies(&e.scenario)
        .iter()
        .map(|p| p.name)
        .filter(|n| e.policies.contains_key(*n))
        .collect();
    let mut kinds = std::collections::BTreeSet::new();
    for r in e.policies.values() {
        for run in &r.runs {
            kinds.extend(run.downtime_by_kind.keys().cloned());
        }
    }
    let mut out = String::from(match e.scenario.failures {
        Failures::Drawn => "| failure kind |",
        Failures::InfiniteHbd(_) => "| trace category |",
    });
    for n in &names {
        let _ = write!(out, " {n} |");
    }
    let _ = writeln!(out, "\n|---|{}", "---:|".repeat(names.len()));
    for kind in kinds {
        let _ = write!(out, "| {kind} |");
        for n in &names {
            let (count, seconds) = e.policies[*n]
                .runs
                .iter()
                .filter_map(|run| run.downtime_by_kind.get(&kind))
                .fold((0, 0.0), |(c, t), (n, s)| (c + n, t + s));
            if count == 0 {
                let _ = write!(out, " — |");
            } else {
                let _ = write!(out, " {:.1} |", seconds / count as f64 / 60.0);
            }
        }
        let _ = writeln!(out);
    }
    out
}

/// The policies `e` ran other than unicron, in the order of [`policies`].
pub(super) fn baselines(e: &Evaluation) -> Vec<&'static str> {
    policies(&e.scenario)
        .iter()
        .map(|p| p.name)
        .filter(|n| *n != "unicron" && e.policies.contains_key(*n))
        .collect()
}

/// unicron's WAF over each baseline's in every scenario of a sweep, with
/// the range over seeds (Markdown): a row per scenario, headed `header`
/// and labelled by `label`.
pub fn ratio_table(
    evaluations: &[Evaluation],
    header: &str,
    label: impl Fn(&Scenario) -> String,
) -> String {
    let Some(first) = evaluations.first() else {
        return String::new();
    };
    let names = baselines(first);
    let mut out = format!("| {header} |");
    for b in &names {
        let _ = write!(out, " vs {b} |");
    }
    let _ = writeln!(out, "\n|---:|{}", "---:|".repeat(names.len()));
    for e in evaluations {
        let _ = write!(out, "| {} |", label(&e.scenario));
        let u = e.policies.get("unicron");
        for b in &names {
            match u.and_then(|u| Some((u.ratio.get(*b)?, u.ratio_range.get(*b)?))) {
                Some((x, (lo, hi))) => {
                    let _ = write!(out, " {x:.2}x ({lo:.2}-{hi:.2}) |");
                }
                None => {
                    let _ = write!(out, " — |");
                }
            }
        }
        let _ = writeln!(out);
    }
    out
}
