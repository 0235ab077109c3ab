//! `unicron-kafka`: a three-broker Apache Kafka cluster on loopback for
//! scripts and people (tools/bench/sustained.py, trying unicron on a real
//! Kafka), the same one the tests start (`unicron_bus::testing::kafka`).
//!
//! Prints `brokers: HOST:PORT,...` once the cluster is ready, then runs
//! until its standard input closes (or a line `stop` arrives), and stops
//! the brokers. A script holds its stdin open for as long as it needs the
//! cluster, so the brokers never outlive it.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use unicron_bus::testing::kafka::{KAFKA_VERSION, KafkaCluster, KafkaOptions, kafka_libs};

#[derive(Debug, Parser)]
#[command(
    name = "unicron-kafka",
    about = "Run an Apache Kafka cluster (KRaft) on loopback until stdin closes."
)]
struct Args {
    /// Brokers (each also a controller).
    #[arg(long, default_value_t = 3)]
    brokers: usize,
    /// Apache Kafka's jars (default: $UNICRON_KAFKA_LIBS, else where
    /// `./dev setup test` puts them).
    #[arg(long, value_name = "DIR")]
    kafka_libs: Option<PathBuf>,
    /// Keep storage and logs here (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.brokers == 0 {
        eprintln!("error: --brokers: at least 1");
        return ExitCode::from(2);
    }
    let Some(libs) = args.kafka_libs.clone().or_else(kafka_libs) else {
        eprintln!("error: --kafka-libs: no Apache Kafka jars (./dev setup test fetches them)");
        return ExitCode::from(2);
    };
    let options = KafkaOptions {
        brokers: args.brokers,
        ..KafkaOptions::default()
    };
    let mut cluster = match KafkaCluster::start(&libs, args.dir.as_deref(), &options) {
        Ok(cluster) => cluster,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "Apache Kafka {KAFKA_VERSION}, {} brokers, logs in {}; close stdin to stop",
        args.brokers,
        cluster.dir().display()
    );
    let pids: Vec<String> = cluster
        .node_ids()
        .into_iter()
        .filter_map(|id| cluster.pid(id))
        .map(|p| p.to_string())
        .collect();
    println!(
        "brokers: {} pids: {}",
        cluster.bootstrap_servers(),
        pids.join(",")
    );
    for line in std::io::stdin().lock().lines() {
        match line {
            Ok(l) if l.trim() == "stop" => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    cluster.shutdown();
    ExitCode::SUCCESS
}
