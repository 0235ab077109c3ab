//! The services `unicron up` runs side by side in one process, and the one
//! way they stop: each gets a [`Shutdown`] when it is spawned, the set
//! reports the first that ends by itself, and [`ServiceSet::stop`] stops
//! them in their [`StopOrder`].

use std::future::Future;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// When a service stops, relative to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopOrder {
    /// With the deciding services, first.
    WithTheRest,
    /// After all others have stopped, so it sees everything they wrote
    /// (the archiver); it gets four times the grace, and an error it ends
    /// with fails the run.
    Last,
}

/// Completes when the set stops the service it was given to.
pub struct Shutdown(oneshot::Receiver<()>);

impl Shutdown {
    /// Until the set stops this service (or is dropped).
    pub async fn wait(self) {
        let _ = self.0.await;
    }
}

struct Member {
    name: &'static str,
    order: StopOrder,
    stop: Option<oneshot::Sender<()>>,
    /// `None` once the set has collected how it ended.
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

/// Services running as tasks of this process.
pub struct ServiceSet {
    members: Vec<Member>,
    ended_tx: mpsc::UnboundedSender<usize>,
    ended_rx: mpsc::UnboundedReceiver<usize>,
}

impl Default for ServiceSet {
    fn default() -> Self {
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        ServiceSet {
            members: Vec::new(),
            ended_tx,
            ended_rx,
        }
    }
}

impl ServiceSet {
    /// Starts `run` as a task; it must return once its [`Shutdown`]
    /// completes.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, order: StopOrder, run: F)
    where
        F: FnOnce(Shutdown) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        let index = self.members.len();
        let ended = self.ended_tx.clone();
        let service = run(Shutdown(stopped));
        let task = tokio::spawn(async move {
            let result = service.await.context(name);
            let _ = ended.send(index);
            result
        });
        self.members.push(Member {
            name,
            order,
            stop: Some(stop),
            task: Some(task),
        });
    }

    /// Waits for the first service to end by itself (before it was told
    /// to stop): its error, or one saying it stopped.
    pub async fn failed(&mut self) -> anyhow::Error {
        loop {
            let Some(index) = self.ended_rx.recv().await else {
                // The set holds a sender: the channel never closes.
                continue;
            };
            let member = &mut self.members[index];
            // Left in place until it is collected: cancelled meanwhile,
            // the task is still stopped by `stop`.
            let Some(task) = member.task.as_mut() else {
                continue;
            };
            let ended = task.await;
            member.task = None;
            return match ended {
                Ok(Ok(())) => anyhow::anyhow!("{} stopped unexpectedly", member.name),
                Ok(Err(e)) => e,
                Err(e) => anyhow::anyhow!("{} task: {e}", member.name),
            };
        }
    }

    /// Stops every service still running: [`StopOrder::WithTheRest`]
    /// first, each given `grace`, then [`StopOrder::Last`]. Returns the
    /// first error a `Last` service ended with; the others' are logged
    /// (a service that stops while the broker goes away may fail, and the
    /// run's outcome is already decided).
    pub async fn stop(self, grace: Duration) -> anyhow::Result<()> {
        let mut members = self.members;
        members.sort_by_key(|m| m.order);
        let mut outcome = Ok(());
        for order in [StopOrder::WithTheRest, StopOrder::Last] {
            let group: Vec<&mut Member> = members.iter_mut().filter(|m| m.order == order).collect();
            let mut waiting = Vec::new();
            for member in group {
                let Some(task) = member.task.take() else {
                    continue;
                };
                if let Some(stop) = member.stop.take() {
                    let _ = stop.send(());
                }
                waiting.push((member.name, task));
            }
            let limit = if order == StopOrder::Last {
                grace * 4
            } else {
                grace
            };
            for (name, task) in waiting {
                let ended = match tokio::time::timeout(limit, task).await {
                    Ok(Ok(result)) => result,
                    Ok(Err(e)) => Err(anyhow::anyhow!("{name} task: {e}")),
                    Err(_) => {
                        tracing::warn!(service = name, "did not stop within {limit:?}");
                        continue;
                    }
                };
                if let Err(e) = ended {
                    if order == StopOrder::Last && outcome.is_ok() {
                        outcome = Err(e);
                    } else {
                        tracing::warn!(service = name, error = %e, "stopped with an error");
                    }
                }
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_last_stop_after_the_rest_and_their_errors_count() {
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut set = ServiceSet::default();
        for (name, stage) in [
            ("archiver", StopOrder::Last),
            ("planner", StopOrder::WithTheRest),
            ("detector", StopOrder::WithTheRest),
        ] {
            let order = order.clone();
            set.spawn(name, stage, move |shutdown| async move {
                shutdown.wait().await;
                order.lock().unwrap().push(name);
                if name == "archiver" {
                    anyhow::bail!("disk full");
                }
                if name == "detector" {
                    anyhow::bail!("broker gone");
                }
                Ok(())
            });
        }
        let error = set.stop(Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(format!("{error:#}"), "archiver: disk full");
        let order = order.lock().unwrap().clone();
        assert_eq!(order.last(), Some(&"archiver"), "{order:?}");
        assert_eq!(order.len(), 3);
    }

    #[tokio::test]
    async fn a_service_that_ends_by_itself_is_reported() {
        let mut set = ServiceSet::default();
        set.spawn("planner", StopOrder::WithTheRest, |shutdown| async move {
            shutdown.wait().await;
            Ok(())
        });
        set.spawn("executor", StopOrder::WithTheRest, |_| async move {
            anyhow::bail!("backend refused")
        });
        let error = set.failed().await;
        assert_eq!(format!("{error:#}"), "executor: backend refused");
        set.stop(Duration::from_secs(5)).await.unwrap();
    }
}
