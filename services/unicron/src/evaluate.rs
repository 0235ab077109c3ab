//! `unicron evaluate`: recovery policies compared under the same failures in
//! the offline loop (the simulator driving the core detector and planner).

use std::path::{Path, PathBuf};

use anyhow::Context;
use unicron_simulator::evaluate::{self, Evaluation};

use crate::cli::UsageError;

#[derive(Debug, clap::Args)]
pub struct EvaluateArgs {
    /// Scenario: paper, gpus-1024, gpus-10240, rate-0.25x, rate-0.5x, rate-2x, rate-4x, smoke, heterogeneous.
    #[arg(long, default_value = "paper", value_name = "NAME")]
    pub scenario: String,
    /// Seeds per policy (1..=N); the table reports their mean and spread.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub seeds: u64,
    /// Write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the table into DIR/EVALUATION.md (the scenario's section) and the plot to
    /// DIR/evaluation/<scenario>.svg; `--out docs` updates the repository's. Without it,
    /// print only.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(args: EvaluateArgs) -> anyhow::Result<()> {
    let scenarios = evaluate::scenarios();
    let Some(scenario) = scenarios.iter().find(|s| s.name == args.scenario) else {
        let names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
        return Err(UsageError(format!(
            "--scenario: `{}` is none of {}",
            args.scenario,
            names.join(", ")
        ))
        .into());
    };
    if args.seeds == 0 {
        return Err(UsageError("--seeds: must be at least 1".into()).into());
    }
    let bar = indicatif::ProgressBar::new(args.seeds * evaluate::policies().len() as u64);
    let evaluation = evaluate::evaluate(scenario, args.seeds, |policy, seed| {
        bar.set_message(format!("{policy}, seed {seed}"));
        bar.inc(1);
    });
    bar.finish_and_clear();
    let table = evaluate::table(&evaluation);
    print!("{table}");
    if let Some(path) = &args.json {
        std::fs::write(path, json(&evaluation)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &args.out {
        write_docs(dir, &evaluation, &table)?;
        println!(
            "wrote {} and {}",
            dir.join("EVALUATION.md").display(),
            dir.join(plot_name(&evaluation)).display()
        );
    }
    Ok(())
}

/// `{"scenario": ..., "policies": {"unicron": {"waf_fraction": ...}, ...}}`.
fn json(e: &Evaluation) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(&serde_json::json!({
        "scenario": e.scenario.name,
        "setting": e.scenario,
        "seeds": e.seeds,
        "policies": e.policies,
    }))?)
}

fn plot_name(e: &Evaluation) -> String {
    format!("evaluation/{}.svg", e.scenario.name)
}

/// Replaces (or appends) the scenario's section of EVALUATION.md, between
/// markers, and writes its plot beside it.
fn write_docs(dir: &Path, e: &Evaluation, table: &str) -> anyhow::Result<()> {
    let plot = dir.join(plot_name(e));
    std::fs::create_dir_all(plot.parent().expect("has a parent"))
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(&plot, evaluate::svg(e))
        .with_context(|| format!("writing {}", plot.display()))?;
    let doc = dir.join("EVALUATION.md");
    let text = std::fs::read_to_string(&doc).unwrap_or_else(|_| "# Evaluation\n".into());
    let (begin, end) = (
        format!("<!-- evaluate:{}:begin -->", e.scenario.name),
        format!("<!-- evaluate:{}:end -->", e.scenario.name),
    );
    let section = format!(
        "{begin}\n{table}\n![accumulated WAF over time, scenario {}]({})\n\nProduced by `unicron evaluate --scenario {} --seeds {} --out {}`.\n{end}",
        e.scenario.name,
        plot_name(e),
        e.scenario.name,
        e.seeds,
        dir.display()
    );
    let updated = match (text.find(&begin), text.find(&end)) {
        (Some(b), Some(x)) if x > b => format!("{}{section}{}", &text[..b], &text[x + end.len()..]),
        _ => format!("{}\n{section}\n", text.trim_end()),
    };
    std::fs::write(&doc, updated).with_context(|| format!("writing {}", doc.display()))?;
    Ok(())
}
