//! Ticks run while a backlog is read, not only when the input is idle:
//! the detector's lag guard and its re-check of partitions behind are
//! ticks, and a backlog is exactly when they must run.

use super::*;

/// Applies records slowly, emits one output a batch (so a batch is always
/// in flight), and counts the ticks that come while records are waiting.
#[derive(Default)]
struct Backlogged {
    applied: usize,
    total: usize,
    ticks_in_backlog: usize,
    done: Arc<tokio::sync::Notify>,
}

impl Processor for Backlogged {
    type Input = ();
    type Action = Never;
    type Error = RuntimeError;

    fn decode(&self, _: &InboundRecord) -> Result<(), DecodeError> {
        Ok(())
    }

    fn apply(&mut self, _: (), _: &mut Step<'_>) -> Result<Applied<Never>, RuntimeError> {
        std::thread::sleep(std::time::Duration::from_millis(2));
        self.applied += 1;
        if self.applied == self.total {
            self.done.notify_one();
        }
        Ok(Applied::Done)
    }

    fn tick_every(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_millis(20))
    }

    fn tick(&mut self, _: &unicron_runtime::Reading<'_>) -> Result<(), RuntimeError> {
        if self.applied < self.total {
            self.ticks_in_backlog += 1;
        }
        Ok(())
    }

    fn end_batch(&mut self) -> Result<unicron_runtime::BatchEnd, RuntimeError> {
        let mut end = unicron_runtime::BatchEnd::default();
        end.groups.push(vec![unicron_runtime::Outgoing {
            topic: OUTPUT.into(),
            partition: None,
            key: b"k".to_vec(),
            payload: self.applied.to_string().into_bytes(),
        }]);
        Ok(end)
    }
}

#[tokio::test]
async fn ticks_run_while_a_backlog_is_read() {
    let total = 400;
    let records = (0..total)
        .map(|i| record(INPUT, 0, i as i64, "k", b"x"))
        .collect();
    let source = ScriptedSource::new(&[(INPUT, 0)], records);
    let sink = RecordingSink::default();
    let mut backlogged = Backlogged {
        total,
        ..Backlogged::default()
    };
    let done = backlogged.done.clone();
    let mut options = options(Durability::AtLeastOnce);
    options.max_batch = 4;
    drive(
        &source,
        &sink,
        &options,
        &dead_letters(),
        &mut backlogged,
        async move { done.notified().await },
    )
    .await
    .unwrap();
    // 400 records at 2 ms are 0.8 s of backlog: about 40 ticks are due.
    assert!(
        backlogged.ticks_in_backlog >= 10,
        "ticks while records waited: {}",
        backlogged.ticks_in_backlog
    );
}
