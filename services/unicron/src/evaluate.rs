//! `unicron evaluate`: recovery policies compared under the same failures in
//! the offline loop (the simulator driving the core detector and planner).

use std::path::{Path, PathBuf};

use anyhow::Context;
use unicron_simulator::evaluate::{self, Evaluation};
use unicron_simulator::real_trace::RealTrace;
use unicron_simulator::real_trace::stats::TraceStats;

use crate::usage::UsageError;

#[derive(Debug, clap::Args)]
pub struct EvaluateArgs {
    /// Scenario: paper, timeout-30m, gpus-1024, gpus-10240, rate-0.25x, rate-0.5x, rate-2x,
    /// rate-4x, repair-30m, repair-8h, costs-0.5x, costs-2x, smoke, heterogeneous, real-infinitehbd,
    /// real-infinitehbd-checks, real-infinitehbd-heterogeneous, real-infinitehbd-10240; or `rates`
    /// (the paper setting at every failure rate, with a plot of the ratios against the rate);
    /// or `real` (the paper setting and every real-trace scenario, with the trace against the
    /// model's assumptions).
    #[arg(long, default_value = "paper", value_name = "NAME")]
    pub scenario: String,
    /// Seeds per policy (1..=N); the table reports their mean and spread.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub seeds: u64,
    /// Write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the tables into DIR/EVALUATION.md (the scenario's section) and the plots to
    /// DIR/evaluation/<scenario>.svg; `--out docs` updates the repository's. Without it,
    /// print only.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(args: EvaluateArgs) -> anyhow::Result<()> {
    let scenarios = evaluate::scenarios();
    let names: Vec<&str> = match args.scenario.as_str() {
        "rates" => evaluate::RATE_SWEEP.to_vec(),
        "real" => evaluate::REAL_SWEEP.to_vec(),
        one => vec![one],
    };
    let mut chosen = Vec::new();
    for name in names {
        let Some(scenario) = scenarios.iter().find(|s| s.name == name) else {
            let names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
            return Err(UsageError(format!(
                "--scenario: `{}` is none of {}, rates, real",
                args.scenario,
                names.join(", ")
            ))
            .into());
        };
        chosen.push(scenario);
    }
    if args.seeds == 0 {
        return Err(UsageError("--seeds: must be at least 1".into()).into());
    }
    let runs: u64 = chosen
        .iter()
        .map(|s| {
            evaluate::policies(s)
                .iter()
                .filter(|p| p.cannot_run.is_none())
                .count() as u64
        })
        .sum();
    let bar = indicatif::ProgressBar::new(args.seeds * runs);
    let mut evaluations = Vec::new();
    for scenario in chosen {
        evaluations.push(evaluate::evaluate(scenario, args.seeds, |policy, seed| {
            bar.set_message(format!("{}: {policy}, seed {seed}", scenario.name));
            bar.inc(1);
        }));
    }
    bar.finish_and_clear();
    for evaluation in &evaluations {
        println!("{}", tables(evaluation));
    }
    let sweep = sweep_section(&args.scenario, &evaluations);
    if let Some(section) = &sweep {
        print!("{section}");
    }
    if let Some(path) = &args.json {
        std::fs::write(path, json(&evaluations)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &args.out {
        for evaluation in &evaluations {
            let section = format!(
                "{}\n![useful work done over time, scenario {name}, seed 1]({plot})\n\nProduced by `unicron evaluate --scenario {name} --seeds {} --out {}`.",
                tables(evaluation),
                args.seeds,
                dir.display(),
                name = evaluation.scenario.name,
                plot = plot_name(&evaluation.scenario.name),
            );
            write_section(dir, &evaluation.scenario.name, &section)?;
            write_plot(dir, &evaluation.scenario.name, &evaluate::svg(evaluation))?;
        }
        if let Some(section) = &sweep {
            let plot = plot_name(&args.scenario);
            let section = format!(
                "{section}\n![{}]({plot})\n\nProduced by `unicron evaluate --scenario {} --seeds {} --out {}`.",
                if args.scenario == "rates" {
                    "unicron's WAF over each baseline's against the failure rate"
                } else {
                    "hours between failures: the trace against Poisson arrivals"
                },
                args.scenario,
                args.seeds,
                dir.display()
            );
            write_section(dir, &args.scenario, &section)?;
            let svg = if args.scenario == "rates" {
                evaluate::ratio_svg(&evaluations)
            } else {
                TraceStats::of(&RealTrace::infinitehbd()).svg()
            };
            write_plot(dir, &args.scenario, &svg)?;
        }
        println!(
            "wrote {} and its plots in {}",
            dir.join("EVALUATION.md").display(),
            dir.join("evaluation").display()
        );
    }
    Ok(())
}

/// What a sweep adds to its scenarios' tables: unicron's ratios over each
/// baseline across the sweep, and for `real` the trace against the model.
fn sweep_section(name: &str, evaluations: &[Evaluation]) -> Option<String> {
    match name {
        "rates" => Some(evaluate::ratio_table(evaluations, "failure rate", |s| {
            format!("{}x", s.rate)
        })),
        "real" => {
            let stats = TraceStats::of(&RealTrace::infinitehbd());
            let repair_h = evaluate::scenarios()[0].repair_s / 3_600.0;
            Some(format!(
                "The InfiniteHBD trace against the model the drawn scenarios assume:\n\n{}\nunicron's WAF over each baseline's, the paper setting beside the real trace (range over seeds):\n\n{}",
                stats.markdown(repair_h),
                evaluate::ratio_table(evaluations, "scenario", |s| format!("`{}`", s.name))
            ))
        }
        _ => None,
    }
}

/// A scenario's result table and its downtime per failure by kind.
fn tables(e: &Evaluation) -> String {
    format!(
        "{}\nMean downtime per failure that hit a job, minutes (injection until the job ran again):\n\n{}",
        evaluate::table(e),
        evaluate::downtime_table(e)
    )
}

/// `[{"scenario": ..., "policies": {"unicron": {"waf_fraction": ...}, ...}}, ...]`.
fn json(evaluations: &[Evaluation]) -> anyhow::Result<String> {
    let all: Vec<serde_json::Value> = evaluations
        .iter()
        .map(|e| {
            serde_json::json!({
                "scenario": e.scenario.name,
                "setting": e.scenario,
                "seeds": e.seeds,
                "trace_lengths": e.trace_lengths,
                "policies": e.policies,
                "not_run": e.not_run,
            })
        })
        .collect();
    Ok(serde_json::to_string_pretty(&all)?)
}

fn plot_name(name: &str) -> String {
    format!("evaluation/{name}.svg")
}

fn write_plot(dir: &Path, name: &str, svg: &str) -> anyhow::Result<()> {
    let plot = dir.join(plot_name(name));
    std::fs::create_dir_all(plot.parent().expect("has a parent"))
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(&plot, svg).with_context(|| format!("writing {}", plot.display()))
}

/// Replaces (or appends) the section `name` of DIR/EVALUATION.md, between
/// markers.
fn write_section(dir: &Path, name: &str, body: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let doc = dir.join("EVALUATION.md");
    let text = std::fs::read_to_string(&doc).unwrap_or_else(|_| "# Evaluation\n".into());
    let (begin, end) = (
        format!("<!-- evaluate:{name}:begin -->"),
        format!("<!-- evaluate:{name}:end -->"),
    );
    let section = format!("{begin}\n{body}\n{end}");
    let updated = match (text.find(&begin), text.find(&end)) {
        (Some(b), Some(x)) if x > b => format!("{}{section}{}", &text[..b], &text[x + end.len()..]),
        _ => format!("{}\n{section}\n", text.trim_end()),
    };
    std::fs::write(&doc, updated).with_context(|| format!("writing {}", doc.display()))
}
