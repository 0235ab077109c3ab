//! `unicron goodput`: each job's wall time split by cause (productive,
//! snapshot, detection, recovery, redone, waiting), derived from the log by
//! the same model the status page and its metrics use.

use unicron_core::goodput::{CAUSES, Goodput, Split};
use unicron_core::planner::InputEvent;
use unicron_core::status::Record;
use unicron_history::{History, TopicNames};

use crate::config::Config;
use crate::history::HistoryArgs;
use crate::usage::UsageError;

#[derive(Debug, clap::Args)]
pub struct GoodputArgs {
    /// Only this job.
    #[arg(long)]
    pub job: Option<String>,
    /// Only this cluster's jobs.
    #[arg(long)]
    pub cluster: Option<String>,
    #[command(flatten)]
    pub history: HistoryArgs,
    /// Print JSON: one object per job, and one per cluster.
    #[arg(long)]
    pub json: bool,
}

/// Every job's facts from `history`, in any order (the model sorts).
pub fn of_history(history: &History, node_gpus: u32) -> Goodput {
    let mut goodput = Goodput::new(node_gpus);
    for r in &history.cluster {
        goodput.apply(&Record::Input(InputEvent::Cluster(r.record.clone())));
    }
    for r in &history.failures {
        goodput.apply(&Record::Input(InputEvent::Failure(r.record.clone())));
    }
    for r in &history.results {
        goodput.apply(&Record::Input(InputEvent::Result(r.record.clone())));
    }
    for r in &history.decisions {
        goodput.apply(&Record::Decision(r.record.clone()));
    }
    for r in &history.commands {
        goodput.apply(&Record::Command(r.record.clone()));
    }
    goodput
}

pub fn run(config: &Config, args: GoodputArgs) -> anyhow::Result<()> {
    let names = TopicNames::new(&config.kafka);
    let origin = args.history.origin(&config.kafka)?;
    let history = History::load(&origin, names, &|_| {})?;
    let goodput = of_history(&history, config.planner.tuning.node_gpus);
    let splits: Vec<((String, String), Split)> = goodput
        .splits()
        .into_iter()
        .filter(|((c, j), _)| {
            args.cluster.as_deref().is_none_or(|x| x == c)
                && args.job.as_deref().is_none_or(|x| x == j)
        })
        .collect();
    if splits.is_empty() {
        return Err(UsageError("no job in the history matches".into()).into());
    }
    if args.json {
        let jobs: Vec<serde_json::Value> = splits
            .iter()
            .map(|((cluster, job), split)| {
                serde_json::json!({"cluster": cluster, "job": job, "goodput": split.goodput(), "split": split})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(());
    }
    println!("{}", header());
    for ((cluster, job), split) in &splits {
        println!("{}", line(cluster, job, split));
    }
    Ok(())
}

fn header() -> String {
    let mut text = format!(
        "{:<12} {:<16} {:>9} {:>8}",
        "cluster", "job", "wall s", "goodput"
    );
    for cause in CAUSES {
        text.push_str(&format!(" {cause:>10}"));
    }
    text.push_str("  failures");
    text
}

/// One job on one line: wall time, the productive share, seconds by cause.
pub fn line(cluster: &str, job: &str, split: &Split) -> String {
    let mut text = format!(
        "{cluster:<12} {job:<16} {:>9.1} {:>7.1}%",
        split.wall_s,
        100.0 * split.goodput()
    );
    for cause in CAUSES {
        text.push_str(&format!(" {:>10.1}", split.seconds(cause)));
    }
    text.push_str(&format!("  {}", split.failures));
    if split.checkpoint_restores > 0 {
        text.push_str(&format!(
            " ({} from a checkpoint: redone unknown)",
            split.checkpoint_restores
        ));
    }
    text
}
