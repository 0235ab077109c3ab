//! Fuzzing every decoder of what arrives on a topic (docs/fuzzing.md): the
//! Avro codec of every record type (`RecordType::ALL`, raw and Confluent
//! framing), the direct decoders (`TelemetryBatch`, `AgentEvent`), and
//! every external format (`InputFormat::ALL`: OTLP proto and JSON,
//! prometheus-kafka-adapter, Vector, Fluent Bit and rsyslog JSON). The
//! lists come from the families' own definitions, so a new record type or
//! format is fuzzed without touching this file.
//!
//! Properties, on arbitrary bytes and on valid records with bytes flipped,
//! cut, inserted and appended:
//! 1. no decoder panics, and every failure carries a non-empty reason;
//! 2. valid records round-trip (encode → decode == original);
//! 3. the direct decoder agrees with apache-avro whenever it accepts;
//! 4. memory is bounded by the input, not by what a length prefix claims:
//!    a counting allocator measures each decode.
//!
//! The default case counts keep this target to seconds in debug;
//! `PROPTEST_CASES=200000 cargo test --release -p unicron-codec --test
//! fuzz_decoders` is the long run (docs/fuzzing.md).

// The counting allocator below implements `GlobalAlloc`, which is unsafe.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Debug;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord as OtlpLog, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use prost::Message;
use serde_json::{Value, json};
use unicron_codec::formats::{self, ExternalInput, InputFormat, LabelMap, Signal};
use unicron_codec::samples;
use unicron_codec::schemas::{AvroRecord, ForRecord, RecordType};
use unicron_codec::{AvroCodec, Framing};
use unicron_core::*;

// ---------------------------------------------------------------------------
// A counting allocator: the largest single allocation and the peak of live
// bytes on the current thread while a closure runs.

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc(size: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + size as isize;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
    let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
}

fn note_free(size: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get() - size as isize));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note_free(layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_free(layout.size());
        note_alloc(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What one closure allocated on this thread.
#[derive(Debug, Clone, Copy)]
struct Usage {
    /// Most bytes live at once, above what was live before.
    peak: usize,
    /// The largest single allocation.
    largest: usize,
}

fn measured<R>(f: impl FnOnce() -> R) -> (R, Usage) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    LARGEST.with(|l| l.set(0));
    let out = f();
    let usage = Usage {
        peak: (PEAK.with(Cell::get) - start).max(0) as usize,
        largest: LARGEST.with(Cell::get),
    };
    (out, usage)
}

/// The memory a decode of `len` input bytes may take: a constant factor of
/// the input (decoded values, maps, field names), never what a length
/// prefix claims.
fn memory_bound(len: usize) -> usize {
    256 * len + (1 << 20)
}

fn check_memory(what: &str, len: usize, usage: Usage) -> Result<(), TestCaseError> {
    let bound = memory_bound(len);
    prop_assert!(
        usage.peak <= bound && usage.largest <= bound,
        "{what}: {len} input bytes took {usage:?} (bound {bound})"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Case counts: the defaults keep the target fast; PROPTEST_CASES overrides.

fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Strategies for every record type of records.rs.

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z0-9_.-]{0,12}",
        1 => ".{0,24}",
        1 => Just(String::new()),
    ]
}

fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => any::<f64>(),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(-0.0),
    ]
}

fn string_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(text(), text(), 0..4)
}

fn strings() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(text(), 0..4)
}

fn opt<T: Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Option<T>> {
    proptest::option::of(s)
}

fn sample() -> impl Strategy<Value = MetricSample> {
    (
        text(),
        double(),
        any::<i64>(),
        opt(any::<i32>()),
        opt(text()),
        opt(any::<i32>()),
        string_map(),
    )
        .prop_map(
            |(name, value, time_ms, gpu, job, rank, labels)| MetricSample {
                name,
                value,
                time_ms,
                gpu,
                job,
                rank,
                labels,
            },
        )
}

fn telemetry() -> impl Strategy<Value = TelemetryBatch> {
    (
        text(),
        text(),
        text(),
        proptest::collection::vec(sample(), 0..6),
    )
        .prop_map(|(cluster, node, source, samples)| TelemetryBatch {
            cluster,
            node,
            source,
            samples,
        })
}

fn log_record() -> impl Strategy<Value = LogRecord> {
    (
        (text(), text(), any::<i64>(), text()),
        (opt(text()), opt(any::<i32>()), opt(any::<i32>())),
        (".{0,80}", string_map()),
    )
        .prop_map(
            |((cluster, node, time_ms, source), (job, rank, gpu), (line, attributes))| LogRecord {
                cluster,
                node,
                time_ms,
                source,
                job,
                rank,
                gpu,
                line,
                attributes,
            },
        )
}

fn agent() -> impl Strategy<Value = AgentEvent> {
    let kind = prop_oneof![
        Just(AgentEventKind::Heartbeat),
        Just(AgentEventKind::ProcessExit),
        Just(AgentEventKind::IterationDone),
        Just(AgentEventKind::Unknown),
    ];
    (
        (text(), text(), any::<i64>(), kind),
        (opt(text()), opt(any::<i32>()), opt(any::<i32>())),
        (
            opt(any::<i32>()),
            opt(any::<i64>()),
            opt(double()),
            opt(double()),
        ),
    )
        .prop_map(
            |(
                (cluster, node, time_ms, kind),
                (job, rank, exit_code),
                (signal, iteration, iteration_time_ms, compute_ms),
            )| AgentEvent {
                cluster,
                node,
                time_ms,
                kind,
                job,
                rank,
                exit_code,
                signal,
                iteration,
                iteration_time_ms,
                compute_ms,
                idle_tick: false,
                worker: None,
            },
        )
}

fn failure() -> impl Strategy<Value = FailureEvent> {
    let kind = proptest::sample::select(FailureKind::ALL.to_vec());
    let severity = proptest::sample::select(vec![
        Severity::Sev1,
        Severity::Sev2,
        Severity::Sev3,
        Severity::Unknown,
    ]);
    let method = proptest::sample::select(vec![
        DetectionMethod::LogRule,
        DetectionMethod::MetricRule,
        DetectionMethod::Heartbeat,
        DetectionMethod::ProcessSupervision,
        DetectionMethod::Statistical,
        DetectionMethod::Learned,
        DetectionMethod::Unknown,
    ]);
    let evidence = (text(), any::<i32>(), any::<i64>(), opt(text()), text()).prop_map(
        |(topic, partition, offset, node, excerpt)| Evidence {
            topic,
            partition,
            offset,
            node,
            excerpt,
        },
    );
    (
        (text(), text(), opt(text()), opt(any::<i32>())),
        (opt(text()), opt(any::<i32>()), kind, severity, method),
        (
            opt(text()),
            proptest::collection::vec(evidence, 0..4),
            any::<i64>(),
            any::<i64>(),
        ),
    )
        .prop_map(
            |(
                (id, cluster, node, gpu),
                (job, rank, kind, severity, method),
                (rule, evidence, first_evidence_ms, detected_ms),
            )| FailureEvent {
                id,
                cluster,
                node,
                gpu,
                job,
                rank,
                kind,
                severity,
                method,
                rule,
                evidence,
                first_evidence_ms,
                detected_ms,
                slowdown: None,
            },
        )
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    let point = (any::<i32>(), double()).prop_map(|(gpus, flops)| ThroughputPoint { gpus, flops });
    (
        (double(), any::<i32>(), any::<i32>(), any::<i32>()),
        (
            any::<i32>(),
            any::<i64>(),
            proptest::collection::vec(point, 0..5),
        ),
    )
        .prop_map(
            |(
                (weight, min_gpus, max_gpus, unit_gpus),
                (dp_degree, checkpoint_interval_s, throughput),
            )| JobSpec {
                weight,
                min_gpus,
                max_gpus,
                unit_gpus,
                dp_degree,
                checkpoint_interval_s,
                throughput,
            },
        )
}

fn cluster_event() -> impl Strategy<Value = ClusterEvent> {
    let kind = proptest::sample::select(vec![
        ClusterEventKind::JobSubmitted,
        ClusterEventKind::JobUpdated,
        ClusterEventKind::JobFinished,
        ClusterEventKind::NodeJoined,
        ClusterEventKind::NodeRepaired,
        ClusterEventKind::NodeRemoved,
        ClusterEventKind::Unknown,
    ]);
    (
        (text(), any::<i64>(), kind),
        (opt(text()), opt(any::<i32>()), opt(text()), opt(job_spec())),
    )
        .prop_map(
            |((cluster, time_ms, kind), (node, gpus, job_id, job))| ClusterEvent {
                cluster,
                time_ms,
                kind,
                node,
                gpus,
                job_id,
                job,
                address: None,
                launch: None,
                reason: None,
                snapshot_address: None,
                snapshots: Vec::new(),
                restored: None,
                check: None,
            },
        )
}

fn decision() -> impl Strategy<Value = Decision> {
    let trigger = (text(), text(), text(), any::<i32>(), any::<i64>()).prop_map(
        |(kind, ref_id, topic, partition, offset)| Trigger {
            kind,
            ref_id,
            topic,
            partition,
            offset,
        },
    );
    let alternative = (
        proptest::collection::btree_map(text(), any::<i32>(), 0..4),
        double(),
        double(),
    )
        .prop_map(|(allocation, waf, objective)| Alternative {
            allocation,
            waf,
            objective,
        });
    (
        (text(), text(), any::<i64>(), trigger),
        (text(), text(), text()),
        (
            proptest::collection::vec(alternative, 0..3),
            opt(any::<i32>()),
            proptest::collection::btree_map(text(), strings(), 0..3),
        ),
        (text(), strings()),
    )
        .prop_map(
            |(
                (id, cluster, time_ms, trigger),
                (inputs_digest, policy, policy_version),
                (alternatives, chosen_index, assignment),
                (reason, command_ids),
            )| Decision {
                id,
                cluster,
                time_ms,
                trigger,
                inputs_digest,
                policy,
                policy_version,
                alternatives,
                chosen_index,
                assignment,
                reason,
                command_ids,
            },
        )
}

fn command() -> impl Strategy<Value = Command> {
    let action = proptest::sample::select(vec![
        CommandAction::Reattempt,
        CommandAction::Restart,
        CommandAction::Reconfigure,
        CommandAction::IsolateNode,
        CommandAction::Resume,
        CommandAction::Pause,
        CommandAction::Unknown,
    ]);
    (
        (text(), text(), text(), any::<i64>(), action),
        (opt(text()), strings(), opt(text()), strings()),
        (text(), proptest::collection::vec(any::<u8>(), 0..80)),
    )
        .prop_map(
            |(
                (id, cluster, decision_id, time_ms, action),
                (job, nodes, restore_from, causation),
                (key_id, signature),
            )| Command {
                id,
                cluster,
                decision_id,
                time_ms,
                action,
                job,
                nodes,
                restore_from,
                causation,
                key_id,
                signature,
                rendezvous: None,
                snapshots: None,
            },
        )
}

fn command_result() -> impl Strategy<Value = CommandResult> {
    let status = proptest::sample::select(vec![
        CommandStatus::Accepted,
        CommandStatus::Succeeded,
        CommandStatus::Failed,
        CommandStatus::Rejected,
        CommandStatus::Unknown,
    ]);
    (
        (text(), text(), any::<i64>(), status),
        (opt(text()), any::<i64>(), text()),
    )
        .prop_map(
            |((command_id, cluster, time_ms, status), (reason, duration_ms, executor))| {
                CommandResult {
                    command_id,
                    cluster,
                    time_ms,
                    status,
                    reason,
                    duration_ms,
                    executor,
                    node: None,
                }
            },
        )
}

fn dead_letter() -> impl Strategy<Value = DeadLetter> {
    (
        (text(), any::<i32>(), any::<i64>()),
        (
            opt(proptest::collection::vec(any::<u8>(), 0..16)),
            proptest::collection::vec(any::<u8>(), 0..64),
            any::<i64>(),
        ),
        (text(), text(), any::<i64>()),
    )
        .prop_map(
            |(
                (source_topic, partition, offset),
                (key, payload, payload_size),
                (error, service, time_ms),
            )| {
                DeadLetter {
                    source_topic,
                    partition,
                    offset,
                    key,
                    payload,
                    payload_size,
                    error,
                    service,
                    time_ms,
                }
            },
        )
}

// ---------------------------------------------------------------------------
// Mutations of a valid encoding.

#[derive(Debug, Clone)]
enum Mutation {
    /// XOR a byte (the index wraps around the input).
    Flip(usize, u8),
    /// Keep only a prefix.
    Truncate(usize),
    /// Insert bytes.
    Insert(usize, Vec<u8>),
    /// Append bytes.
    Extend(Vec<u8>),
    /// Remove a run of bytes.
    Delete(usize, usize),
    /// Set a byte to a small value: another union branch, enum symbol,
    /// length or count, still well-formed often enough to be accepted.
    Set(usize, u8),
    /// Overwrite a run with a varint claiming a huge length or count (this
    /// is what a corrupt length prefix looks like).
    Claim(usize, i64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let claim = prop_oneof![
        (16u32..63).prop_map(|bits| 1i64 << bits),
        (16u32..63).prop_map(|bits| -(1i64 << bits)),
        Just(i64::MAX),
        Just(i64::MIN),
        (1i64..100_000_000),
    ];
    prop_oneof![
        4 => (any::<usize>(), 1u8..=255).prop_map(|(at, x)| Mutation::Flip(at, x)),
        2 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, b)| Mutation::Insert(at, b)),
        1 => proptest::collection::vec(any::<u8>(), 1..8).prop_map(Mutation::Extend),
        1 => (any::<usize>(), 1usize..8).prop_map(|(at, n)| Mutation::Delete(at, n)),
        3 => (any::<usize>(), 0u8..12).prop_map(|(at, v)| Mutation::Set(at, v)),
        3 => (any::<usize>(), claim).prop_map(|(at, n)| Mutation::Claim(at, n)),
    ]
}

fn varint(value: i64) -> Vec<u8> {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let byte = (zigzag & 0x7f) as u8;
        zigzag >>= 7;
        if zigzag == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
    for m in mutations {
        let len = bytes.len();
        let at = |i: usize| if len == 0 { 0 } else { i % (len + 1) };
        match m {
            Mutation::Flip(i, x) if len > 0 => bytes[i % len] ^= x,
            Mutation::Flip(..) => {}
            Mutation::Set(i, v) if len > 0 => bytes[i % len] = *v,
            Mutation::Set(..) => {}
            Mutation::Truncate(i) => bytes.truncate(at(*i)),
            Mutation::Insert(i, b) => {
                let i = at(*i);
                bytes.splice(i..i, b.iter().copied());
            }
            Mutation::Extend(b) => bytes.extend_from_slice(b),
            Mutation::Delete(i, n) => {
                let i = at(*i).min(len);
                bytes.drain(i..(i + n).min(len));
            }
            Mutation::Claim(i, n) => {
                let i = at(*i).min(len);
                let v = varint(*n);
                let end = (i + v.len()).min(len);
                bytes.splice(i..end, v);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The Avro codec.

const FRAMINGS: [Framing; 2] = [Framing::Raw, Framing::Confluent { schema_id: 7 }];

/// Equality that holds for NaN too (both decoders read the same bits).
fn same<T: Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// Decodes `bytes` as `T` with each framing: no panic, a non-empty reason
/// on failure, memory bounded by the input.
fn decode_any<T: AvroRecord + Debug>(bytes: &[u8]) -> Result<(), TestCaseError> {
    for framing in FRAMINGS {
        let codec = AvroCodec::<T>::new(framing);
        let (result, usage) = measured(|| codec.decode(bytes));
        check_memory(T::RECORD.name(), bytes.len(), usage)?;
        if let Err(e) = result {
            let reason = e.to_string();
            prop_assert!(
                !reason.trim().is_empty() && !reason.ends_with(": "),
                "{}: empty reason {reason:?}",
                T::RECORD.name()
            );
        }
    }
    Ok(())
}

/// Every record type (`RecordType::ALL`) on `bytes`: its codec in both
/// framings, and its direct decoder against apache-avro where it has one.
fn decode_every_type(bytes: &[u8]) -> Result<(), TestCaseError> {
    for record in RecordType::ALL {
        record.with(DecodeAs(bytes))?;
    }
    Ok(())
}

struct DecodeAs<'a>(&'a [u8]);

impl ForRecord for DecodeAs<'_> {
    type Output = Result<(), TestCaseError>;
    fn run<T: AvroRecord + PartialEq + Debug>(self) -> Self::Output {
        decode_any::<T>(self.0)?;
        if T::DIRECT_DECODER.is_some() {
            check_direct_agrees(&AvroCodec::<T>::default(), self.0)?;
        }
        Ok(())
    }
}

/// A valid record round-trips in both framings, and with `mutations`
/// applied it decodes to something or fails with a reason.
fn round_trip_and_mutate<T: AvroRecord + Debug>(
    record: &T,
    mutations: &[Mutation],
) -> Result<(), TestCaseError> {
    for framing in FRAMINGS {
        let codec = AvroCodec::<T>::new(framing);
        let bytes = codec.encode(record).expect("a valid record encodes");
        let decoded = codec.decode(&bytes);
        prop_assert!(
            matches!(&decoded, Ok(back) if same(back, record)),
            "{}: {record:?} came back as {decoded:?}",
            T::RECORD.name()
        );
        let mut bad = bytes.clone();
        mutate(&mut bad, mutations);
        let (result, usage) = measured(|| codec.decode(&bad));
        check_memory(T::RECORD.name(), bad.len(), usage)?;
        if let Err(e) = result {
            prop_assert!(!e.to_string().trim().is_empty());
        }
        check_direct_agrees::<T>(&codec, &bad)?;
    }
    Ok(())
}

/// Whenever the direct decoder accepts bytes, apache-avro (the reference)
/// accepts them too and reads the same record.
fn check_direct_agrees<T: AvroRecord + Debug>(
    codec: &AvroCodec<T>,
    bytes: &[u8],
) -> Result<(), TestCaseError> {
    let datum = match codec.framing() {
        Framing::Raw => bytes,
        Framing::Confluent { .. } if bytes.len() >= 5 => &bytes[5..],
        Framing::Confluent { .. } => return Ok(()),
    };
    let (direct, usage) = measured(|| unicron_codec::schemas::decode_datum::<T>(datum));
    check_memory("direct decoder", datum.len(), usage)?;
    if let Some(direct) = direct {
        let reference = AvroCodec::<T>::default().decode_written_by(T::RECORD.schema(), datum);
        prop_assert!(
            matches!(&reference, Ok(r) if same(r, &direct)),
            "{}: direct decoder read {direct:?}, apache-avro {reference:?} from {datum:?}",
            T::RECORD.name()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(512))]

    /// Property 1: arbitrary bytes, every record type, both framings.
    #[test]
    fn arbitrary_bytes_are_errors_with_reasons(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        decode_every_type(&bytes)?;
        // Confluent framing with the right header in front.
        let mut framed = vec![0, 0, 0, 0, 7];
        framed.extend_from_slice(&bytes);
        decode_every_type(&framed)?;
    }

    /// Properties 1-4 on the direct decoder: arbitrary bytes never make it
    /// accept what apache-avro rejects.
    #[test]
    fn direct_decoder_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        check_direct_agrees(&AvroCodec::<TelemetryBatch>::default(), &bytes)?;
        check_direct_agrees(&AvroCodec::<AgentEvent>::default(), &bytes)?;
    }
}

proptest! {
    #![proptest_config(cases(1024))]

    /// Properties 1, 3 and 4 on every record type, whether or not it has a
    /// strategy of its own below: its sample (every optional field set, or
    /// none), raw and framed, with bytes flipped, cut, inserted, appended.
    #[test]
    fn every_record_type_mutated(
        index in 0..RecordType::ALL.len(),
        full in any::<bool>(),
        m in proptest::collection::vec(mutation(), 1..4),
    ) {
        let record = RecordType::ALL[index];
        let raw = samples::encoded(record, full);
        let mut framed = vec![0, 0, 0, 0, 7];
        framed.extend_from_slice(&raw);
        for mut bytes in [raw, framed] {
            mutate(&mut bytes, &m);
            record.with(DecodeAs(&bytes))?;
        }
    }
}

/// The direct decoder against apache-avro on one small mutation of a valid
/// encoding: most stay well-formed, so both decoders read them.
fn direct_agrees_after<T: AvroRecord + Debug>(
    record: &T,
    at: usize,
    value: u8,
) -> Result<(), TestCaseError> {
    let codec = AvroCodec::<T>::default();
    let mut bytes = codec.encode(record).unwrap();
    mutate(&mut bytes, &[Mutation::Set(at, value)]);
    check_direct_agrees(&codec, &bytes)
}

proptest! {
    #![proptest_config(cases(1024))]

    #[test]
    fn direct_decoder_agrees_on_mutated_telemetry(
        record in telemetry(), at in any::<usize>(), value in 0u8..12,
    ) {
        direct_agrees_after(&record, at, value)?;
    }

    #[test]
    fn direct_decoder_agrees_on_mutated_agent_events(
        record in agent(), at in any::<usize>(), value in 0u8..12,
    ) {
        direct_agrees_after(&record, at, value)?;
    }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn telemetry_batches(record in telemetry(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }

    #[test]
    fn agent_events(record in agent(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }

    #[test]
    fn log_records(record in log_record(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }

    #[test]
    fn failure_events(record in failure(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }

    #[test]
    fn cluster_events(record in cluster_event(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }

    #[test]
    fn decisions(record in decision(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }

    #[test]
    fn commands(record in command(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }

    #[test]
    fn command_results(record in command_result(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }

    #[test]
    fn dead_letters(record in dead_letter(), m in proptest::collection::vec(mutation(), 1..4)) {
        round_trip_and_mutate(&record, &m)?;
    }
}

/// The smallest input claiming a huge count: a record whose first array or
/// map length prefix says 2^25 items with nothing behind it.
fn huge_claim<T: AvroRecord + Debug>(record: &T, cut: usize) -> Result<(), TestCaseError> {
    let codec = AvroCodec::<T>::default();
    let mut bytes = codec.encode(record).unwrap();
    bytes.truncate(cut);
    bytes.extend(varint(1 << 25));
    let (result, usage) = measured(|| codec.decode(&bytes));
    prop_assert!(result.is_err(), "{}: {result:?}", T::RECORD.name());
    check_memory(T::RECORD.name(), bytes.len(), usage)
}

#[test]
fn huge_length_prefixes_do_not_allocate_what_they_claim() {
    // LogRecord with every optional empty ends with the attributes map.
    let log = LogRecord {
        cluster: "c".into(),
        node: "n".into(),
        time_ms: 0,
        source: "s".into(),
        job: None,
        rank: None,
        gpu: None,
        line: "l".into(),
        attributes: BTreeMap::new(),
    };
    let bytes = AvroCodec::<LogRecord>::default().encode(&log).unwrap();
    huge_claim(&log, bytes.len() - 1).unwrap();
    // TelemetryBatch: the samples array (direct decoder and apache-avro).
    let batch = TelemetryBatch {
        cluster: "c".into(),
        node: "n".into(),
        source: "s".into(),
        samples: vec![],
    };
    let bytes = AvroCodec::<TelemetryBatch>::default()
        .encode(&batch)
        .unwrap();
    huge_claim(&batch, bytes.len() - 1).unwrap();
    // A string length: the cluster of a CommandResult.
    let result = CommandResult {
        command_id: String::new(),
        cluster: String::new(),
        time_ms: 0,
        status: CommandStatus::Accepted,
        reason: None,
        duration_ms: 0,
        executor: String::new(),
        node: None,
    };
    huge_claim(&result, 0).unwrap();
}

// ---------------------------------------------------------------------------
// External formats.

/// One input of every format (`InputFormat::ALL`), and of every signal
/// for the formats that need one (and none, which must fail with a reason).
fn inputs() -> Vec<ExternalInput> {
    let mut inputs = Vec::new();
    for &format in InputFormat::ALL {
        let signals = if format.needs_signal() {
            vec![Some(Signal::Metrics), Some(Signal::Logs), None]
        } else {
            vec![None]
        };
        for signal in signals {
            inputs.push(ExternalInput {
                topic: "t".into(),
                format,
                signal,
                labels: LabelMap::default(),
                optional: false,
                cluster: None,
            });
        }
    }
    inputs
}

/// Decodes with every external format: no panic, every problem a
/// non-empty reason, memory bounded by the input.
fn decode_external(payload: &[u8]) -> Result<(), TestCaseError> {
    for input in inputs() {
        let (decoded, usage) = measured(|| formats::decode(&input, payload));
        check_memory(input.format.name(), payload.len(), usage)?;
        for problem in &decoded.problems {
            prop_assert!(
                !problem.trim().is_empty(),
                "{}: empty problem",
                input.format.name()
            );
        }
    }
    Ok(())
}

fn json_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        text().prop_map(Value::from),
        Just(json!("2026-03-01T10:22:01.5Z")),
        Just(json!(1_772_360_521.25)),
        Just(json!("NaN")),
        Just(json!("1.5")),
        Just(json!("n1")),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_scalar().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Keys the JSON formats look at, and others.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(vec![
            "timestamp", "@timestamp", "value", "name", "labels", "tags", "message", "log",
            "MESSAGE", "host", "Hostname", "gpu", "rank", "counter", "gauge", "histogram",
            "kubernetes", "cluster", "resourceMetrics", "resourceLogs", "scopeMetrics",
            "scopeLogs", "metrics", "logRecords", "dataPoints", "attributes", "asDouble",
            "asInt", "timeUnixNano", "body", "stringValue", "key", "resource",
        ])
        .prop_map(str::to_string),
        1 => text(),
    ]
}

fn json_object() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(key(), json_value(), 0..8)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn attribute() -> impl Strategy<Value = KeyValue> {
    let scalar = prop_oneof![
        text().prop_map(any_value::Value::StringValue),
        any::<i64>().prop_map(any_value::Value::IntValue),
        any::<f64>().prop_map(any_value::Value::DoubleValue),
        any::<bool>().prop_map(any_value::Value::BoolValue),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(any_value::Value::BytesValue),
    ];
    let value = scalar.prop_recursive(3, 12, 3, |inner| {
        proptest::collection::vec(inner, 0..3).prop_map(|values| {
            any_value::Value::ArrayValue(ArrayValue {
                values: values
                    .into_iter()
                    .map(|v| AnyValue { value: Some(v) })
                    .collect(),
            })
        })
    });
    let key = prop_oneof![
        proptest::sample::select(vec!["host.name", "Hostname", "gpu", "cluster", "rank"])
            .prop_map(str::to_string),
        text(),
    ];
    (key, opt(value)).prop_map(|(key, value)| KeyValue {
        key,
        value: value.map(|v| AnyValue { value: Some(v) }),
        ..Default::default()
    })
}

fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    proptest::collection::vec(attribute(), 0..4)
}

fn metrics_request() -> impl Strategy<Value = ExportMetricsServiceRequest> {
    let point = (
        attributes(),
        any::<u64>(),
        opt(prop_oneof![
            any::<f64>().prop_map(number_data_point::Value::AsDouble),
            any::<i64>().prop_map(number_data_point::Value::AsInt),
        ]),
    )
        .prop_map(|(attributes, time_unix_nano, value)| NumberDataPoint {
            attributes,
            time_unix_nano,
            value,
            ..Default::default()
        });
    let metric = (text(), any::<u8>(), proptest::collection::vec(point, 0..4)).prop_map(
        |(name, kind, data_points)| Metric {
            name,
            data: match kind % 3 {
                0 => Some(metric::Data::Gauge(Gauge { data_points })),
                1 => Some(metric::Data::Sum(Sum {
                    data_points,
                    ..Default::default()
                })),
                _ => None,
            },
            ..Default::default()
        },
    );
    let resource = (attributes(), proptest::collection::vec(metric, 0..4)).prop_map(
        |(attributes, metrics)| ResourceMetrics {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    proptest::collection::vec(resource, 0..3)
        .prop_map(|resource_metrics| ExportMetricsServiceRequest { resource_metrics })
}

fn logs_request() -> impl Strategy<Value = ExportLogsServiceRequest> {
    let record = (attributes(), any::<u64>(), any::<u64>(), opt(".{0,40}")).prop_map(
        |(attributes, time_unix_nano, observed_time_unix_nano, body)| OtlpLog {
            attributes,
            time_unix_nano,
            observed_time_unix_nano,
            body: body.map(|b| AnyValue {
                value: Some(any_value::Value::StringValue(b)),
            }),
            ..Default::default()
        },
    );
    let resource = (attributes(), proptest::collection::vec(record, 0..4)).prop_map(
        |(attributes, log_records)| ResourceLogs {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records,
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    proptest::collection::vec(resource, 0..3)
        .prop_map(|resource_logs| ExportLogsServiceRequest { resource_logs })
}

proptest! {
    #![proptest_config(cases(512))]

    /// Arbitrary bytes through every external format.
    #[test]
    fn external_formats_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        decode_external(&bytes)?;
    }

    /// Random JSON objects with the keys the formats look for, and
    /// mutations of their text.
    #[test]
    fn external_formats_on_json(
        object in json_object(),
        m in proptest::collection::vec(mutation(), 0..3),
    ) {
        let mut payload = serde_json::to_vec(&object).unwrap();
        decode_external(&payload)?;
        mutate(&mut payload, &m);
        decode_external(&payload)?;
    }

    /// OTLP requests, encoded by prost and serde, then mutated.
    #[test]
    fn otlp_requests(
        metrics in metrics_request(),
        logs in logs_request(),
        m in proptest::collection::vec(mutation(), 1..4),
    ) {
        for mut payload in [
            metrics.encode_to_vec(),
            logs.encode_to_vec(),
            serde_json::to_vec(&metrics).unwrap(),
            serde_json::to_vec(&logs).unwrap(),
        ] {
            decode_external(&payload)?;
            mutate(&mut payload, &m);
            decode_external(&payload)?;
        }
    }
}

// ---------------------------------------------------------------------------
// Inputs that expand: every label copied into every sample or log line.

fn external(format: InputFormat, signal: Option<Signal>) -> ExternalInput {
    ExternalInput {
        topic: "t".into(),
        format,
        signal,
        labels: LabelMap::default(),
        optional: false,
        cluster: None,
    }
}

/// A JSON object nested `depth` levels under `key`, with `leaves` fields
/// at the bottom: flattened, every leaf's key repeats the whole path.
fn deep_keys(key: &str, depth: usize, leaves: usize) -> Value {
    let mut inner = serde_json::Map::new();
    for i in 0..leaves {
        inner.insert(format!("a{i}"), json!(1));
    }
    let mut value = Value::Object(inner);
    for _ in 0..depth {
        value = json!({ key: value });
    }
    value
}

fn bounded_expansion(input: ExternalInput, payload: &[u8]) {
    let (decoded, usage) = measured(|| formats::decode(&input, payload));
    let bound = memory_bound(payload.len());
    assert!(
        usage.peak <= bound,
        "{}: {} bytes took {usage:?} (bound {bound})",
        input.format.name(),
        payload.len()
    );
    assert!(
        decoded
            .problems
            .iter()
            .any(|p| p.contains("record expands to more than")),
        "{}: {:?}",
        input.format.name(),
        decoded.problems
    );
}

#[test]
fn json_fields_flattened_under_long_paths_stay_bounded() {
    let key = "k".repeat(4000);
    let mut log = deep_keys(&key, 4, 2000);
    log["timestamp"] = json!("2026-03-01T10:22:01Z");
    log["message"] = json!("m");
    log["host"] = json!("n1");
    bounded_expansion(
        external(InputFormat::VectorJson, None),
        &serde_json::to_vec(&log).unwrap(),
    );
    let metric = json!({
        "name": "m", "timestamp": "2026-03-01T10:22:01Z", "counter": {"value": 1.0},
        "tags": deep_keys(&key, 4, 2000),
    });
    bounded_expansion(
        external(InputFormat::VectorJson, None),
        &serde_json::to_vec(&metric).unwrap(),
    );
    let mut fluent = deep_keys(&key, 4, 2000);
    fluent["@timestamp"] = json!(1_772_360_521.25);
    fluent["log"] = json!("m");
    fluent["host"] = json!("n1");
    bounded_expansion(
        external(InputFormat::FluentBitJson, None),
        &serde_json::to_vec(&fluent).unwrap(),
    );
}

#[test]
fn otlp_resource_attributes_copied_to_every_point_stay_bounded() {
    let resource = Some(Resource {
        attributes: vec![
            KeyValue {
                key: "host.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("n1".into())),
                }),
                ..Default::default()
            },
            KeyValue {
                key: "big".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("x".repeat(16_000))),
                }),
                ..Default::default()
            },
        ],
        ..Default::default()
    });
    let points = (0..4000)
        .map(|i| NumberDataPoint {
            time_unix_nano: i,
            value: Some(number_data_point::Value::AsDouble(1.0)),
            ..Default::default()
        })
        .collect();
    let metrics = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: resource.clone(),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "m".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: points,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let logs = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource,
            scope_logs: vec![ScopeLogs {
                log_records: (0..4000)
                    .map(|i| OtlpLog {
                        time_unix_nano: i,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    for (format, payload) in [
        (InputFormat::OtlpProto, metrics.encode_to_vec()),
        (InputFormat::OtlpJson, serde_json::to_vec(&metrics).unwrap()),
    ] {
        bounded_expansion(external(format, Some(Signal::Metrics)), &payload);
    }
    for (format, payload) in [
        (InputFormat::OtlpProto, logs.encode_to_vec()),
        (InputFormat::OtlpJson, serde_json::to_vec(&logs).unwrap()),
    ] {
        bounded_expansion(external(format, Some(Signal::Logs)), &payload);
    }
}

/// Bytes protobuf reads as an empty request (one field it does not know)
/// and JSON `{}` are dead-lettered, not dropped as an empty batch.
#[test]
fn empty_otlp_requests_are_problems() {
    for (format, payload) in [
        (InputFormat::OtlpProto, &b"\x10\x05"[..]),
        (InputFormat::OtlpJson, &b"{}"[..]),
    ] {
        for signal in [Signal::Metrics, Signal::Logs] {
            let decoded = formats::decode(&external(format, Some(signal)), payload);
            assert!(decoded.observations.is_empty());
            assert!(
                decoded.problems[0].contains("carries no resources"),
                "{:?}",
                decoded.problems
            );
        }
    }
}
