//! `unicron up`: everything on one machine. It hosts the embedded broker
//! (or connects to `--brokers`), creates the topics, runs the detector and
//! the planner and serves metrics; the executor and simulator join it with
//! their issues.

use std::io::Write;

use anyhow::Context;
use unicron_bus::admin::{TopicReport, TopicStatus, ensure_topics};
use unicron_bus::{EmbeddedBroker, Topology};

use crate::cli::UpArgs;
use crate::config::Config;

pub async fn run(config: &Config, args: UpArgs) -> anyhow::Result<()> {
    let topology = Topology::builtin();
    let prefix = &config.kafka.topic_prefix;
    let brokers = args.brokers.or_else(|| config.kafka.brokers.clone());

    // Kept alive until the end of the run; dropping it stops the broker.
    let mut _embedded = None;
    let (bootstrap, reports): (String, Vec<TopicReport>) = match brokers {
        Some(brokers) => {
            let reports = ensure_topics(&config.kafka, &brokers, &topology)
                .await
                .with_context(|| format!("creating topics on {brokers}"))?;
            (brokers, reports)
        }
        None => {
            let broker = EmbeddedBroker::start(config.embedded.brokers)
                .context("starting the embedded broker")?;
            let reports = broker.ensure_topics(&topology, prefix)?;
            let bootstrap = broker.bootstrap_servers().to_string();
            _embedded = Some(broker);
            (bootstrap, reports)
        }
    };
    // First line of output, for other tools (kcat -b ...) to connect.
    println!("broker: {bootstrap}");
    let created = reports
        .iter()
        .filter(|r| r.status == TopicStatus::Created)
        .count();
    println!(
        "topics: {} ({} created, {} existed)",
        reports.len(),
        created,
        reports.len() - created
    );

    // The planner, on a state directory of this run unless one is configured.
    let (signer, dev_key) = crate::services::signer_or_dev_key(config)?;
    let mut planner_settings = config.planner.clone();
    let default_dir = unicron_planner::PlannerSettings::default().state_dir;
    let _scratch = if planner_settings.state_dir == default_dir {
        let dir = tempfile::Builder::new().prefix("unicron-up-").tempdir()?;
        planner_settings.state_dir = dir.path().join("planner");
        Some(dir)
    } else {
        None
    };
    let public = hex_key(&signer);
    let kafka = config.kafka.clone();
    let planner_brokers = bootstrap.clone();
    let (stop_planner, planner_stopped) = tokio::sync::oneshot::channel::<()>();
    let planner = tokio::spawn(async move {
        unicron_planner::run(&kafka, &planner_brokers, &planner_settings, signer, async {
            let _ = planner_stopped.await;
        })
        .await
    });
    println!(
        "planner: policy {}, signing key {}{}",
        config.planner.tuning.policy.as_str(),
        public,
        if dev_key {
            " (development key generated for this run)"
        } else {
            ""
        }
    );

    let kafka = config.kafka.clone();
    let detector_brokers = bootstrap.clone();
    let detector_settings = config.detector.clone();
    let (stop_detector, detector_stopped) = tokio::sync::oneshot::channel::<()>();
    let detector = tokio::spawn(async move {
        unicron_detector::run(&kafka, &detector_brokers, &detector_settings, async {
            let _ = detector_stopped.await;
        })
        .await
    });
    println!(
        "detector: {} rules{}",
        config.detector.rules()?.len(),
        config
            .detector
            .inputs
            .iter()
            .map(|i| format!(", {} ({})", i.topic, i.format.name()))
            .collect::<String>()
    );

    let _metrics = if config.metrics.enabled {
        let server = unicron_bus::metrics::serve(config.metrics.listen).await?;
        println!("metrics: http://{}/metrics", server.addr);
        Some(server)
    } else {
        None
    };
    std::io::stdout().flush().ok();

    let wait = async {
        match args.duration {
            Some(duration) => tokio::time::sleep(duration).await,
            None => {
                println!("running; Ctrl-C to stop");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(planner);
    tokio::pin!(detector);
    tokio::select! {
        () = wait => {}
        result = &mut planner => {
            result.context("planner task")?.context("planner")?;
        }
        result = &mut detector => {
            result.context("detector task")?.context("detector")?;
        }
    }
    let _ = stop_planner.send(());
    let _ = stop_detector.send(());
    let grace = std::time::Duration::from_secs(10);
    if !planner.is_finished() {
        let _ = tokio::time::timeout(grace, planner).await;
    }
    if !detector.is_finished() {
        let _ = tokio::time::timeout(grace, detector).await;
    }
    println!("stopped");
    Ok(())
}

fn hex_key(signer: &unicron_core::signing::CommandSigner) -> String {
    signer
        .verifying_key()
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
