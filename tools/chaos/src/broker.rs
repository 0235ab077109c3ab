//! The broker side of the run: a three-broker Apache Kafka cluster
//! (`unicron_bus::testing::kafka`), and the faults it suffers while the
//! services work, on a thread of their own so planner kills go on meanwhile.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use unicron_bus::testing::kafka::{KafkaCluster, KafkaOptions};

/// How long the killed leader stays down: past Kafka's broker session
/// (9 s), so the controller fences it and elects new leaders.
const LEADER_DOWN: Duration = Duration::from_secs(15);

/// Starts the cluster in `dir/kafka`.
pub fn start(libs: &Path, dir: &Path) -> anyhow::Result<KafkaCluster> {
    Ok(KafkaCluster::start(
        libs,
        Some(&dir.join("kafka")),
        &KafkaOptions::default(),
    )?)
}

/// When the faults happen, in seconds from the start of the run.
pub struct Schedule {
    /// SIGKILL of the broker that leads partition 0 of `topic`, restarted
    /// [`LEADER_DOWN`] later.
    pub kill_leader_at: f64,
    pub topic: String,
    /// A rolling restart of every broker (controlled shutdown, start,
    /// wait for all partitions in sync), one after another.
    pub rolling_restart_at: f64,
}

/// What the fault thread did, for the report.
pub struct Faults {
    pub cluster: KafkaCluster,
    pub killed_leader: Option<u32>,
    pub rolled: usize,
}

/// Runs `schedule` against `cluster` on a thread; its lines go to
/// `report`. Joining gives the cluster back.
pub fn inject(
    mut cluster: KafkaCluster,
    schedule: Schedule,
    started: Instant,
    report: mpsc::Sender<String>,
) -> JoinHandle<anyhow::Result<Faults>> {
    std::thread::spawn(move || {
        let wait_until = |at: f64| {
            let at = Duration::from_secs_f64(at);
            if let Some(left) = at.checked_sub(started.elapsed()) {
                std::thread::sleep(left);
            }
        };
        wait_until(schedule.kill_leader_at);
        let leader = cluster.leader(&schedule.topic, 0);
        if let Some(id) = leader {
            let _ = report.send(format!(
                "chaos: kill -9 broker {id} ({}), leader of {}[0]",
                cluster.address(id),
                schedule.topic
            ));
            cluster.kill(id);
            std::thread::sleep(LEADER_DOWN);
            cluster.start_node(id)?;
            let _ = report.send(format!("chaos: broker {id} restarted"));
        } else {
            let _ = report.send(format!(
                "chaos: {}[0] had no leader to kill",
                schedule.topic
            ));
        }
        wait_until(schedule.rolling_restart_at);
        let _ = report.send("chaos: rolling restart of every broker".to_string());
        let mut rolled = 0;
        for id in cluster.node_ids() {
            cluster.wait_in_sync(Duration::from_secs(180))?;
            cluster.stop(id);
            cluster.start_node(id)?;
            rolled += 1;
            let _ = report.send(format!("chaos: broker {id} restarted (rolling)"));
        }
        cluster.wait_in_sync(Duration::from_secs(180))?;
        Ok(Faults {
            cluster,
            killed_leader: leader,
            rolled,
        })
    })
}
