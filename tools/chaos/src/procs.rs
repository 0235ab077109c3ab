//! The services as separate OS processes, each with its log file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Sends `signal` (`KILL`, `TERM`, ...) to `pid`.
pub fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status();
}

/// How to start one service, and its current process.
pub struct Service {
    pub name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    logs: PathBuf,
    starts: u32,
    child: Option<Child>,
}

impl Service {
    pub fn new(name: &str, program: &Path, args: &[&str], logs: &Path) -> Service {
        Service {
            name: name.to_string(),
            program: program.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
            logs: logs.to_path_buf(),
            starts: 0,
            child: None,
        }
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Service {
        self.env.push((key.to_string(), value.into()));
        self
    }

    pub fn start(&mut self) -> anyhow::Result<u32> {
        self.starts += 1;
        let log = self.logs.join(format!("{}-{}.log", self.name, self.starts));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(
                "RUST_LOG",
                std::env::var("UNICRON_CHAOS_LOG").unwrap_or_else(|_| "warn,unicron=info".into()),
            )
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()?;
        let pid = child.id();
        self.child = Some(child);
        Ok(pid)
    }

    /// Whether it runs; reaps it if it ended.
    pub fn running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends `signal` to the running process (`STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            kill(child.id(), signal);
        }
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; its exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        kill(child.id(), "TERM");
        for _ in 0..300 {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = child.kill();
        child.wait().ok()
    }

    /// Waits for it to end by itself.
    pub fn wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.take().and_then(|mut c| c.wait().ok())
    }

    /// Forgets a child that was killed elsewhere (the proxy's trap).
    pub fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill9();
    }
}
