//! The Slurm backend: nodes are isolated and given back through Slurm;
//! jobs run by unicron agents are restarted and shrunk by the agents
//! inside their allocation, so only the node (and, for isolation, the
//! allocation it leaves) is Slurm's business here. Jobs Slurm runs without
//! agents are requeued, Slurm's own restart.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use unicron_core::executor::Part;
use unicron_core::{Command, CommandAction};
use unicron_slurm::{REASON_PREFIX, Slurm, SlurmError};

use super::{ActionBackend, Attempt, Attempting, BackendKind, beside_agents};
use crate::check::seconds;
use crate::error::ExecutorError;

/// `kind = "slurm"`: Slurm through `scontrol`: isolate_node drains,
/// return_node resumes (only unicron's own drains); see docs/slurm.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmSettings {
    /// Seconds each Slurm command may take.
    pub timeout_s: f64,
    /// Directory of Slurm's commands; unset: `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// slurm.conf for Slurm's commands (`SLURM_CONF`); unset: theirs.
    pub conf: Option<PathBuf>,
    /// Release an isolated node from the allocation of the agent job it
    /// leaves, so it goes from draining to drained.
    pub release_nodes: bool,
}

impl Default for SlurmSettings {
    fn default() -> Self {
        SlurmSettings {
            timeout_s: 10.0,
            bin_dir: None,
            conf: None,
            release_nodes: true,
        }
    }
}

impl BackendKind for SlurmSettings {
    fn validate(&self) -> Result<(), ExecutorError> {
        seconds("executor.backend.timeout_s", self.timeout_s)
    }

    fn describe(&self) -> String {
        "slurm (scontrol)".to_string()
    }

    fn build(&self) -> Result<Box<dyn ActionBackend>, ExecutorError> {
        // The Slurm client's calls are this executor's metrics too.
        unicron_bus::metrics::describe_all(unicron_slurm::METRICS);
        Ok(Box::new(SlurmBackend::new(
            Slurm::new(
                self.bin_dir.clone(),
                self.conf.clone(),
                Duration::from_secs_f64(self.timeout_s),
            ),
            self.release_nodes,
        )))
    }
}

impl ActionBackend for SlurmBackend {
    fn part(&self, command: &Command) -> Part {
        beside_agents(command)
    }

    fn attempt<'a>(&'a self, command: &'a Command, attempt: u32) -> Attempting<'a> {
        Box::pin(SlurmBackend::attempt(self, command, attempt))
    }
}

pub struct SlurmBackend {
    slurm: Slurm,
    /// Release an isolated node from the allocation of the agent job it
    /// leaves (`scontrol update JobId=J NodeList=...`).
    release_nodes: bool,
}

impl SlurmBackend {
    pub fn new(slurm: Slurm, release_nodes: bool) -> SlurmBackend {
        SlurmBackend {
            slurm,
            release_nodes,
        }
    }

    pub(crate) async fn attempt(&self, command: &Command, _attempt: u32) -> Attempt {
        let done = match command.action {
            CommandAction::IsolateNode => self.isolate(command).await,
            CommandAction::ReturnNode => self.give_back(command).await,
            CommandAction::Reattempt
            | CommandAction::Restart
            | CommandAction::Reconfigure
            | CommandAction::Resume => self.requeue(command).await,
            // Not taken part in (`beside_agents`): the agents stop the job.
            CommandAction::Pause => Ok(Err("pause is the agents' under Slurm".to_string())),
            CommandAction::CheckNode => Ok(Err("check_node is the agents'".to_string())),
            CommandAction::Unknown => Ok(Err("unknown action".to_string())),
        };
        Attempt::from_scheduler(done, passing)
    }

    /// DRAIN with unicron's reason, unless someone else's drain is on the
    /// node already (theirs stays, and says more than ours would).
    async fn isolate(&self, command: &Command) -> Answer {
        let name = one_node(command)?;
        let node = self.slurm.node(name).await?;
        let mut done = if node.drained() && !node.drained_by_unicron() {
            format!("left as it is: {name} is already drained ({})", node.reason)
        } else if node.drained_by_unicron() {
            format!("{name} already drained by unicron ({})", node.reason)
        } else {
            let why = command.causation.first().unwrap_or(&command.decision_id);
            let reason = format!("{REASON_PREFIX} {why}");
            self.slurm.drain(name, &reason).await?;
            format!("{name} drained: {reason}")
        };
        if let (true, Some(job)) = (self.release_nodes, command.job.as_deref()) {
            let jobs = self.slurm.jobs().await?;
            let holding = jobs.iter().find(|j| {
                j.name == job && j.state == "RUNNING" && j.nodes.iter().any(|n| n == name)
            });
            if let Some(held) = holding {
                let rest: Vec<String> = held.nodes.iter().filter(|n| *n != name).cloned().collect();
                if rest.is_empty() {
                    done.push_str(&format!("; Slurm job {} has no other node, kept", held.id));
                } else {
                    self.slurm.keep_nodes(held.id, &rest).await?;
                    done.push_str(&format!(
                        "; Slurm job {} shrunk to {}",
                        held.id,
                        rest.join(",")
                    ));
                }
            }
        }
        Ok(Ok(done))
    }

    /// RESUME, only if unicron's own drain is on the node.
    async fn give_back(&self, command: &Command) -> Answer {
        let name = one_node(command)?;
        let node = self.slurm.node(name).await?;
        if !node.drained() {
            return Ok(Ok(format!("{name} is not drained")));
        }
        if !node.drained_by_unicron() {
            return Ok(Ok(format!(
                "left as it is: {name} was drained by someone else ({})",
                node.reason
            )));
        }
        self.slurm.resume(name).await?;
        Ok(Ok(format!("{name} resumed")))
    }

    /// A job without agents restarts the Slurm way: requeued. Slurm starts
    /// it again after the credential lifetime.
    async fn requeue(&self, command: &Command) -> Answer {
        let Some(job) = command.job.as_deref() else {
            return Ok(Err(format!("{} names no job", command.action.symbol())));
        };
        let jobs = self.slurm.jobs().await?;
        let Some(found) = jobs
            .iter()
            .find(|j| j.name == job && matches!(j.state.as_str(), "RUNNING" | "PENDING"))
        else {
            return Ok(Err(format!(
                "no running or pending Slurm job named `{job}`"
            )));
        };
        self.slurm.requeue(found.id).await?;
        Ok(Ok(format!("Slurm job {} requeued", found.id)))
    }
}

/// Slurm answered (`Ok`: what was done, `Err`: why not), or could not be
/// asked.
type Answer = Result<Result<String, String>, SlurmError>;

fn one_node(command: &Command) -> Result<&str, SlurmError> {
    match command.nodes.as_slice() {
        [node] => Ok(node),
        nodes => Err(SlurmError::Failed {
            command: command.action.symbol().into(),
            status: "not sent".into(),
            message: format!("names {} nodes, not one", nodes.len()),
        }),
    }
}

/// Trouble that may pass: no answer in time, or a controller that cannot
/// be reached. Retried by the executor's backoff; a Slurm that answers no
/// is final.
fn passing(error: &SlurmError) -> bool {
    match error {
        SlurmError::Timeout { .. } => true,
        SlurmError::Failed { message, .. } => {
            message.contains("Unable to contact slurm controller")
                || message.contains("Socket timed out")
        }
        SlurmError::Missing { .. } | SlurmError::Parse { .. } => false,
    }
}
