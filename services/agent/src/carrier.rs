//! The agent as a carrier of the command protocol (`unicron-commands`):
//! the gate, dedupe and results are the protocol's; what a command does to this
//! node's workers is `unicron_core::agent`'s decision.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Mutex;
use unicron_commands::{Carrier, Done, Outcome, Part};
use unicron_core::agent::{self, AgentStep};
use unicron_core::{ClusterEventKind, Command};

use crate::report::{Reported, Reporter};
use crate::settings::AgentSettings;
use crate::supervisor::Supervisor;

pub struct AgentCarrier {
    settings: Arc<AgentSettings>,
    supervisor: Arc<Mutex<Supervisor>>,
    reporter: Arc<Reporter>,
    /// Commands issued this long before the agent started are history.
    history_before_ms: i64,
}

impl AgentCarrier {
    pub fn new(
        settings: Arc<AgentSettings>,
        supervisor: Arc<Mutex<Supervisor>>,
        reporter: Arc<Reporter>,
        started_ms: i64,
    ) -> AgentCarrier {
        let ttl_ms = (settings.command_ttl_s * 1000.0) as i64;
        AgentCarrier {
            settings,
            supervisor,
            reporter,
            history_before_ms: started_ms - ttl_ms,
        }
    }

    fn declared(&self) -> impl Fn(&str) -> bool + '_ {
        |job| self.settings.job(job).is_some()
    }
}

fn done(outcome: Outcome, reason: Option<String>, started: Instant) -> Done {
    Done {
        outcome,
        reason,
        duration_ms: started.elapsed().as_millis() as i64,
        completed_ms: None,
    }
}

impl Carrier for AgentCarrier {
    fn part(&self, command: &Command) -> Part {
        if self.settings.observe_only || command.time_ms < self.history_before_ms {
            return Part::Skip;
        }
        agent::part(
            &self.settings.node,
            self.declared(),
            self.settings.scheduler_isolates,
            command,
        )
    }

    async fn act(&mut self, command: &Command) -> Done {
        let started = Instant::now();
        let mut supervisor = self.supervisor.lock().await;
        let step = agent::step(
            &self.settings.node,
            self.declared(),
            supervisor.running_job(),
            command,
        );
        // Stopped after a failure: its stack is what on-call asks first.
        let stacks = !command.causation.is_empty();
        tracing::info!(command = %command.id, action = command.action.symbol(), ?step, "carrying out");
        match step {
            AgentStep::Check(role) => {
                // The workers are left alone; the check runs beside them.
                drop(supervisor);
                self.check(&role, started).await
            }
            AgentStep::Start(role) => {
                supervisor.stop(None, &command.id, stacks).await;
                match supervisor.start(&role, command) {
                    Ok(()) => done(Outcome::Succeeded, None, started),
                    Err(reason) => done(Outcome::Failed, Some(reason), started),
                }
            }
            AgentStep::Stop { job } => {
                let stopped = supervisor.stop(job.as_deref(), &command.id, stacks).await;
                done(
                    Outcome::Succeeded,
                    Some(format!("{stopped} workers stopped")),
                    started,
                )
            }
            AgentStep::Refuse(reason) => done(Outcome::Failed, Some(reason), started),
            AgentStep::Nothing => done(
                Outcome::Succeeded,
                Some("nothing of it runs on this node".into()),
                started,
            ),
        }
    }

    fn node(&self) -> Option<&str> {
        Some(&self.settings.node)
    }
}

impl AgentCarrier {
    /// Runs this node's part of a pre-flight check; the checked node
    /// reports what it measured (`node_checked`), its peer only served.
    async fn check(&self, role: &unicron_core::agent::CheckRole, started: Instant) -> Done {
        let check = crate::preflight::run(&self.settings, role).await;
        let summary = if check.failures.is_empty() {
            "check ran".to_string()
        } else {
            format!("check ran: {}", check.failures.join("; "))
        };
        tracing::info!(command = %role.command_id, ?check, "pre-flight check");
        if role.pair_rank == 0 {
            let mut event = self.reporter.cluster_event(ClusterEventKind::NodeChecked);
            event.node = Some(self.settings.node.clone());
            event.check = Some(Box::new(check));
            self.reporter.send(Reported::Cluster(event));
        }
        done(Outcome::Succeeded, Some(summary), started)
    }
}
