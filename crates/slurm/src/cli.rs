//! Slurm's commands, run with a timeout each: `scontrol`, `sinfo`,
//! `squeue`. Output is read only after the command exits; stderr becomes
//! the error's message.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::SlurmError;
use crate::json::{self, JobView, NodeView};
use crate::metrics::CALLS;

/// Bytes of a failed command's output kept in its error.
const MESSAGE_BYTES: usize = 512;

/// How to reach Slurm's commands.
#[derive(Debug)]
pub struct Slurm {
    /// Where the commands are; `None`: on `PATH`.
    bin_dir: Option<PathBuf>,
    /// `SLURM_CONF` for the commands; `None`: theirs (the environment's,
    /// or Slurm's default).
    conf: Option<PathBuf>,
    timeout: Duration,
    /// Slurm 22.05's scontrol has no `--json`: its nodes come from sinfo.
    nodes_from_sinfo: AtomicBool,
}

impl Slurm {
    pub fn new(bin_dir: Option<PathBuf>, conf: Option<PathBuf>, timeout: Duration) -> Slurm {
        Slurm {
            bin_dir,
            conf,
            timeout,
            nodes_from_sinfo: AtomicBool::new(false),
        }
    }

    /// Every node with its state and reason.
    pub async fn nodes(&self) -> Result<Vec<NodeView>, SlurmError> {
        if !self.nodes_from_sinfo.load(Ordering::Relaxed) {
            match self
                .json("scontrol", &["show", "nodes", "--json"], json::parse_nodes)
                .await
            {
                Err(SlurmError::Failed { message, .. })
                    if message.contains("unrecognized option") =>
                {
                    self.nodes_from_sinfo.store(true, Ordering::Relaxed);
                }
                answer => return answer,
            }
        }
        self.json("sinfo", &["--json"], json::parse_nodes).await
    }

    /// One node, or an error if Slurm does not know it.
    pub async fn node(&self, name: &str) -> Result<NodeView, SlurmError> {
        self.nodes()
            .await?
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| SlurmError::Failed {
                command: "scontrol show nodes".into(),
                status: "no such node".into(),
                message: format!("Slurm does not know node `{name}`"),
            })
    }

    /// Every job Slurm lists, with its nodes.
    pub async fn jobs(&self) -> Result<Vec<JobView>, SlurmError> {
        self.json("squeue", &["--json"], json::parse_jobs).await
    }

    /// DRAIN (never DOWN: with `ReturnToService=2` a DOWN node comes
    /// straight back): nothing new lands on the node, and what runs there
    /// may finish.
    pub async fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        let (node, reason) = (format!("NodeName={node}"), format!("Reason={reason}"));
        self.run("scontrol", &["update", &node, "State=DRAIN", &reason])
            .await
            .map(drop)
    }

    pub async fn resume(&self, node: &str) -> Result<(), SlurmError> {
        let node = format!("NodeName={node}");
        self.run("scontrol", &["update", &node, "State=RESUME"])
            .await
            .map(drop)
    }

    /// Shrinks a running job's allocation to `nodes` (its steps on the
    /// nodes let go of end, unless started with `--no-kill`).
    pub async fn keep_nodes(&self, job: u64, nodes: &[String]) -> Result<(), SlurmError> {
        let (job, nodes) = (
            format!("JobId={job}"),
            format!("NodeList={}", nodes.join(",")),
        );
        self.run("scontrol", &["update", &job, &nodes])
            .await
            .map(drop)
    }

    pub async fn requeue(&self, job: u64) -> Result<(), SlurmError> {
        self.run("scontrol", &["requeue", &job.to_string()])
            .await
            .map(drop)
    }

    async fn json<T>(
        &self,
        program: &str,
        args: &[&str],
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<T, SlurmError> {
        let out = self.run(program, args).await?;
        parse(&out).map_err(|reason| SlurmError::Parse {
            command: command_line(program, args),
            reason,
        })
    }

    /// Runs `program args`; its stdout if it exits 0.
    pub async fn run(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        let path = match &self.bin_dir {
            Some(dir) => dir.join(program),
            None => PathBuf::from(program),
        };
        let mut command = tokio::process::Command::new(&path);
        if let Some(conf) = &self.conf {
            command.env("SLURM_CONF", conf);
        }
        let child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| SlurmError::Missing {
                program: path.display().to_string(),
                source,
            })?;
        let command = || command_line(program, args);
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                return Err(SlurmError::Failed {
                    command: command(),
                    status: "not waited for".into(),
                    message: e.to_string(),
                });
            }
            Err(_) => {
                return Err(SlurmError::Timeout {
                    command: command(),
                    after: self.timeout,
                });
            }
        };
        ::metrics::counter!(CALLS.name, "program" => program.to_string(), "ok" => out.status.success().to_string())
            .increment(1);
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let message = if stderr.trim().is_empty() {
            stdout
        } else {
            stderr
        };
        Err(SlurmError::Failed {
            command: command(),
            status: out.status.to_string(),
            message: tail(message.trim()).to_string(),
        })
    }
}

fn command_line(program: &str, args: &[&str]) -> String {
    std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The end of `text`, where Slurm puts the cause, cut at a character.
fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(MESSAGE_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
