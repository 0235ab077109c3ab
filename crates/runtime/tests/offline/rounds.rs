//! A round-applying processor's batches overlap: the next batch is read
//! and applied while the last one's outputs are delivered, and a batch's
//! records are marked done only once its outputs have landed.

use std::sync::Arc;

use tokio::sync::Semaphore;
use unicron_codec::{DecodeError, InboundRecord};
use unicron_runtime::{
    Applied, BatchEnd, Durability, Never, Outgoing, Processor, RuntimeError, Step, drive,
};

use super::script::{RecordingSink, ScriptedSource, record};
use super::{INPUT, OUTPUT, dead_letters, options};

/// One output per batch naming the offsets it applied, as the detector's
/// round record does.
#[derive(Default)]
struct Rounds {
    applied: Vec<i64>,
}

impl Processor for Rounds {
    type Input = ();
    type Action = Never;
    type Error = RuntimeError;

    fn decode(&self, _: &InboundRecord) -> Result<(), DecodeError> {
        Ok(())
    }

    fn apply(&mut self, _: (), step: &mut Step<'_>) -> Result<Applied<Never>, RuntimeError> {
        self.applied.push(step.record().offset);
        Ok(Applied::Done)
    }

    fn end_batch(&mut self) -> Result<BatchEnd, RuntimeError> {
        let mut end = BatchEnd::default();
        if !self.applied.is_empty() {
            let offsets: Vec<String> = self.applied.drain(..).map(|o| o.to_string()).collect();
            end.groups.push(vec![Outgoing {
                topic: OUTPUT.into(),
                partition: None,
                key: b"round".to_vec(),
                payload: format!("round {}", offsets.join(",")).into_bytes(),
            }]);
        }
        Ok(end)
    }
}

/// Polls `ready` (yielding to the loop) until it holds.
async fn until(mut ready: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if ready() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the loop never got there");
}

/// Records before `n` handed out, and not `n` itself.
fn handed_out(source: &ScriptedSource, n: usize) -> bool {
    source.sent_through(n - 1) && !source.sent_through(n)
}

#[tokio::test]
async fn batches_are_applied_while_earlier_rounds_are_delivered() {
    let source = ScriptedSource::new(
        &[(INPUT, 0)],
        (0..6).map(|o| record(INPUT, 0, o, "k", b"x")).collect(),
    );
    let gate = Arc::new(Semaphore::new(0));
    let sink = RecordingSink::gated(gate.clone());
    let mut rounds = Rounds::default();
    // One record a batch, so each is a round of its own.
    let mut options = options(Durability::AtLeastOnce);
    options.max_batch = 1;
    let stop = tokio::sync::Notify::new();
    let settle = || async {
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
    };
    let rounds_sent = || sink.texts(OUTPUT).len();
    let marked = || -> Vec<i64> { source.marks().into_iter().map(|(_, _, o)| o).collect() };
    let test = async {
        // No round is delivered: four are queued while records are read
        // and applied; the fifth record is applied and its round waits
        // for room; nothing is marked done.
        until(|| rounds_sent() == 4).await;
        settle().await;
        assert_eq!(rounds_sent(), 4);
        assert!(
            handed_out(&source, 5),
            "the fifth record is read, not the sixth"
        );
        assert!(marked().is_empty(), "marked before its round landed");
        // The first round lands: its record is marked, and only its.
        gate.add_permits(1);
        until(|| !marked().is_empty()).await;
        settle().await;
        assert_eq!(marked(), [0]);
        // Every round lands: the last is marked with nothing left to read.
        gate.add_permits(10);
        source.done_through(INPUT, 0, 5).await;
        stop.notify_one();
    };
    let outputs = dead_letters();
    let (driven, ()) = tokio::join!(
        drive(
            &source,
            &sink,
            &options,
            &outputs,
            &mut rounds,
            stop.notified(),
        ),
        test
    );
    driven.unwrap();
    let expected: Vec<String> = (0..6).map(|o| format!("round {o}")).collect();
    assert_eq!(sink.texts(OUTPUT), expected);
    assert_eq!(marked(), [0, 1, 2, 3, 4, 5]);
}
