//! The Kubernetes backend: nodes are isolated and given back through the
//! API server (cordon, unicron's taint, evictions); jobs run by unicron
//! agents in pods are restarted by the agents, so only the node is the
//! API server's business for them. Workloads without agents (JobSet,
//! PyTorchJob, Job) restart through their own controller, and resume by
//! lifting their `suspend`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use unicron_core::executor::Part;
use unicron_core::{Command, CommandAction};
use unicron_kubernetes::{ApiSettings, Evictions, Isolation, Kube, KubeError};

use super::{ActionBackend, Attempt, Attempting, BackendKind, beside_agents};
use crate::check::config;
use crate::error::ExecutorError;

/// `kind = "kubernetes"`: Kubernetes through its API server: isolate_node
/// cordons, taints `unicron.io/isolated` and evicts the job's pods;
/// return_node undoes only unicron's own; workloads without agents restart
/// through their controller; see docs/kubernetes.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesSettings {
    /// A kubeconfig file; unset: `KUBECONFIG`, `~/.kube/config`, or the
    /// pod's service account.
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Namespaces whose workloads the executor may touch.
    pub namespaces: Vec<String>,
    /// Seconds each API call may take.
    pub timeout_s: f64,
    /// The resource pods ask GPUs with.
    pub gpu_resource: String,
    /// Attempts of an eviction a PodDisruptionBudget refuses.
    pub eviction_attempts: u32,
    /// Delete an isolated node's pods at once when the node is not Ready
    /// (its kubelet cannot confirm an eviction).
    pub force_delete_unready: bool,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        let api = ApiSettings::default();
        KubernetesSettings {
            kubeconfig: api.kubeconfig,
            context: api.context,
            namespaces: api.namespaces,
            timeout_s: api.timeout_s,
            gpu_resource: "nvidia.com/gpu".to_string(),
            eviction_attempts: Evictions::default().attempts,
            force_delete_unready: true,
        }
    }
}

impl KubernetesSettings {
    /// The API server settings.
    pub fn api(&self) -> ApiSettings {
        ApiSettings {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            namespaces: self.namespaces.clone(),
            timeout_s: self.timeout_s,
        }
    }
}

impl BackendKind for KubernetesSettings {
    fn validate(&self) -> Result<(), ExecutorError> {
        self.api().validate("executor.backend").map_err(config)?;
        if let Some(path) = &self.kubeconfig
            && !path.is_file()
        {
            return Err(config(format!(
                "executor.backend.kubeconfig: {} is not a file",
                path.display()
            )));
        }
        if self.eviction_attempts == 0 {
            return Err(config(
                "executor.backend.eviction_attempts: must be at least 1",
            ));
        }
        if self.gpu_resource.is_empty() {
            return Err(config("executor.backend.gpu_resource: must not be empty"));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("kubernetes (namespaces {})", self.namespaces.join(","))
    }

    fn build(&self) -> Result<Box<dyn ActionBackend>, ExecutorError> {
        Ok(Box::new(KubernetesBackend::new(
            self.api(),
            self.gpu_resource.clone(),
            Evictions {
                attempts: self.eviction_attempts,
                force_on_unready: self.force_delete_unready,
                ..Evictions::default()
            },
        )))
    }
}

impl ActionBackend for KubernetesBackend {
    fn part(&self, command: &Command) -> Part {
        beside_agents(command)
    }

    fn attempt<'a>(&'a self, command: &'a Command, attempt: u32) -> Attempting<'a> {
        Box::pin(KubernetesBackend::attempt(self, command, attempt))
    }
}

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
            // Not taken part in (`beside_agents`): the agents stop the job.
            CommandAction::Pause => Ok(Err("pause is the agents' under Kubernetes".into())),
            CommandAction::CheckNode => Ok(Err("check_node is the agents'".into())),
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

#[cfg(test)]
mod tests {
    use unicron_core::CommandAction;

    use super::*;
    use crate::backend::Outcome;

    fn command(action: CommandAction, nodes: &[&str]) -> Command {
        Command {
            id: "cmd-1".into(),
            cluster: "k".into(),
            decision_id: "d-1".into(),
            time_ms: 42,
            action,
            job: None,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            restore_from: None,
            causation: vec!["f-1".into()],
            key_id: "k".into(),
            signature: vec![],
            rendezvous: None,
            snapshots: None,
        }
    }

    #[tokio::test]
    async fn an_unreachable_api_server_is_retried_and_never_taken_for_success() {
        let dir = tempfile::tempdir().unwrap();
        let backend = KubernetesBackend::new(
            unicron_kubernetes::testing::unreachable_api(dir.path()),
            "nvidia.com/gpu".into(),
            Evictions::default(),
        );
        // Passing trouble: the executor's backoff tries again, then fails
        // the command with this reason.
        match backend
            .attempt(&command(CommandAction::IsolateNode, &["n1"]), 1)
            .await
        {
            Attempt::Transient(why) => {
                assert!(why.contains("get node n1"), "{why}");
                assert!(why.contains("unreachable"), "{why}");
            }
            other => panic!("expected a retry, got {other:?}"),
        }
        // A command it cannot carry out is final without a call.
        match backend
            .attempt(&command(CommandAction::IsolateNode, &["n1", "n2"]), 1)
            .await
        {
            Attempt::Answer {
                outcome: Outcome::Failed,
                reason: Some(why),
                ..
            } => assert!(why.contains("not one"), "{why}"),
            other => panic!("expected a failed answer, got {other:?}"),
        }
    }
}
