//! The standalone Kafka-protocol broker: tansu (docs/operations.md), on
//! loopback with SQLite storage, so a restart keeps topics, records and
//! group offsets.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::procs::Service;

pub struct Broker {
    pub addr: SocketAddr,
    service: Service,
}

/// Where tansu is: `--tansu`, `$TANSU`, where `./dev test` installs it
/// (`$UNICRON_CACHE`, `~/.cache/unicron`, CI's cache), or `PATH`.
pub fn find(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = given {
        return Some(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os("TANSU") {
        return Some(PathBuf::from(path));
    }
    let caches = [
        std::env::var_os("UNICRON_CACHE").map(PathBuf::from),
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/unicron")),
        Some(PathBuf::from("/var/cache/unicron-tools")),
    ];
    if let Some(found) = caches
        .into_iter()
        .flatten()
        .map(|cache| cache.join("bin/tansu"))
        .find(|p| p.is_file())
    {
        return Some(found);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("tansu"))
            .find(|p| p.is_file())
    })
}

impl Broker {
    pub fn start(tansu: &Path, port: u16, dir: &Path, logs: &Path) -> anyhow::Result<Broker> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let url = format!("tcp://{addr}");
        // tansu opens a SQLite path relative to its working directory.
        let storage = "sqlite://tansu.db".to_string();
        let mut service = Service::new(
            "tansu",
            tansu,
            &[
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                &storage,
            ],
            logs,
        )
        .in_dir(dir);
        service.start()?;
        let broker = Broker { addr, service };
        broker.wait_ready()?;
        Ok(broker)
    }

    fn wait_ready(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        while TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                anyhow::bail!("tansu did not listen on {} within 30 s", self.addr);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Kills the broker (SIGKILL: a crash, not a shutdown) and starts it
    /// again on the same storage. tansu 0.6.0's SIGTERM shutdown stops its
    /// storage actor while group updates are in flight (a panic at
    /// tansu-storage service.rs:337) and can persist a consumer group whose
    /// leader is no longer a member, which then never forms again
    /// (docs/chaos.md); a crash leaves only committed SQLite state.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.service.kill9();
        self.service.start()?;
        self.wait_ready()
    }

    pub fn stop(&mut self) {
        self.service.stop();
    }
}
