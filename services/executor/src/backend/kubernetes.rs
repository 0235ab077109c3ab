//! The Kubernetes backend: nodes are isolated and given back through the
//! API server (cordon, unicron's taint, evictions); jobs run by unicron
//! agents in pods are restarted by the agents, so only the node is the
//! API server's business for them. Workloads without agents (JobSet,
//! PyTorchJob, Job) restart through their own controller, and resume by
//! lifting their `suspend`.

use tokio::sync::OnceCell;
use unicron_core::{Command, CommandAction};
use unicron_kubernetes::{ApiSettings, Evictions, Isolation, Kube, KubeError};

use super::Attempt;

pub struct KubernetesBackend {
    api: ApiSettings,
    gpu_resource: String,
    evictions: Evictions,
    /// Connected at the first command: the executor starts (and reports
    /// ready) while the API server is away, and its commands wait in
    /// retries instead.
    kube: OnceCell<Kube>,
}

impl KubernetesBackend {
    pub fn new(api: ApiSettings, gpu_resource: String, evictions: Evictions) -> KubernetesBackend {
        KubernetesBackend {
            api,
            gpu_resource,
            evictions,
            kube: OnceCell::new(),
        }
    }

    pub(crate) async fn attempt(&self, command: &Command, _attempt: u32) -> Attempt {
        let done = match self.kube.get_or_try_init(|| Kube::connect(&self.api)).await {
            Ok(kube) => self.act(kube, command).await,
            Err(error) => Err(error),
        };
        Attempt::from_scheduler(done, KubeError::passing)
    }

    async fn act(&self, kube: &Kube, command: &Command) -> Answer {
        match command.action {
            CommandAction::IsolateNode => {
                let node = match one_node(command) {
                    Ok(node) => node,
                    Err(why) => return Ok(Err(why)),
                };
                let isolation = Isolation {
                    node,
                    failure: command.causation.first().unwrap_or(&command.decision_id),
                    command_id: &command.id,
                    job: command.job.as_deref(),
                };
                kube.isolate(&isolation, &self.evictions).await.map(Ok)
            }
            CommandAction::ReturnNode => match one_node(command) {
                Ok(node) => kube.give_back(node).await.map(Ok),
                Err(why) => Ok(Err(why)),
            },
            CommandAction::Reattempt
            | CommandAction::Restart
            | CommandAction::Reconfigure
            | CommandAction::Resume => self.restart(kube, command).await,
            // Not taken part in (`Backend::part`): the agents stop the job.
            CommandAction::Pause => Ok(Err("pause is the agents' under Kubernetes".into())),
            CommandAction::Unknown => Ok(Err("unknown action".into())),
        }
    }

    /// A workload without agents: a suspended one is resumed; a running one
    /// is restarted by its controller for reattempt, restart and
    /// reconfigure (a JobSet's replicated jobs cannot be resized, so a
    /// reconfigure restarts it at its size; the scheduler keeps it off the
    /// nodes unicron isolated), and left running for resume.
    async fn restart(&self, kube: &Kube, command: &Command) -> Answer {
        let Some(job) = command.job.as_deref() else {
            return Ok(Err(format!("{} names no job", command.action.symbol())));
        };
        let Some(workload) = kube.workload(job, &self.gpu_resource).await? else {
            return Ok(Err(format!(
                "no JobSet, PyTorchJob or Job `{job}` in namespaces {}",
                self.api.namespaces.join(", ")
            )));
        };
        if workload.finished.is_some() {
            return Ok(Err(format!(
                "{} {}/{} has ended ({})",
                workload.kind.name(),
                workload.namespace,
                workload.name,
                workload.finished.as_deref().unwrap_or_default()
            )));
        }
        match (command.action, workload.suspended) {
            // Resumed, or left suspended by a restart cut short.
            (_, true) => kube.suspend(&workload, false).await.map(Ok),
            // The planner's first placement of a job it learned of: the
            // workload runs already, where the scheduler put it.
            (CommandAction::Resume, false) => Ok(Ok(format!(
                "{} {}/{} runs already: nothing to resume",
                workload.kind.name(),
                workload.namespace,
                workload.name
            ))),
            _ => kube.restart(&workload).await.map(Ok),
        }
    }
}

/// The API server answered (`Ok`: what was done, `Err`: why not), or could
/// not be asked.
type Answer = Result<Result<String, String>, KubeError>;

fn one_node(command: &Command) -> Result<&str, String> {
    match command.nodes.as_slice() {
        [node] => Ok(node),
        nodes => Err(format!(
            "{} names {} nodes, not one",
            command.action.symbol(),
            nodes.len()
        )),
    }
}
