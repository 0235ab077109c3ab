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

#[tokio::test]
async fn the_next_batch_is_applied_while_the_last_round_is_delivered() {
    let source = ScriptedSource::new(
        &[(INPUT, 0)],
        (0..3).map(|o| record(INPUT, 0, o, "k", b"x")).collect(),
    );
    let gate = Arc::new(Semaphore::new(0));
    let sink = RecordingSink::gated(gate.clone());
    let mut rounds = Rounds::default();
    // One record a batch, so each is a round of its own.
    let mut options = options(Durability::AtLeastOnce);
    options.max_batch = 1;
    let stop = tokio::sync::Notify::new();
    let test = async {
        // Round 0 is queued and not delivered: record 1 is read and
        // applied meanwhile, and nothing is marked done.
        until(|| source.sent_through(1)).await;
        until(|| sink.texts(OUTPUT).len() == 1).await;
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(sink.texts(OUTPUT), ["round 0"]);
        assert!(source.marks().is_empty(), "marked before its round landed");
        // Round 0 lands: record 0 is marked, round 1 goes out.
        gate.add_permits(1);
        until(|| sink.texts(OUTPUT).len() == 2).await;
        assert_eq!(source.marks(), [(INPUT.to_string(), 0, 0)]);
        // Every round lands: the last is marked with nothing left to read.
        gate.add_permits(10);
        source.done_through(INPUT, 0, 2).await;
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
    assert_eq!(sink.texts(OUTPUT), ["round 0", "round 1", "round 2"]);
    let marks: Vec<i64> = source.marks().into_iter().map(|(_, _, o)| o).collect();
    assert_eq!(marks, [0, 1, 2]);
}
