//! The Avro schemas of `schemas/`, compiled into the binary and parsed once.

use std::sync::LazyLock;

use apache_avro::Schema;

use crate::direct_decode::{self, Cursor};

/// A record type of docs/design.md §3 and the `.avsc` file that defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordType {
    TelemetryBatch,
    LogRecord,
    AgentEvent,
    FailureEvent,
    ClusterEvent,
    Decision,
    Command,
    CommandResult,
    DeadLetter,
    PlannerCheckpoint,
    DetectorRound,
}

impl RecordType {
    pub const ALL: [RecordType; 11] = [
        RecordType::TelemetryBatch,
        RecordType::LogRecord,
        RecordType::AgentEvent,
        RecordType::FailureEvent,
        RecordType::ClusterEvent,
        RecordType::Decision,
        RecordType::Command,
        RecordType::CommandResult,
        RecordType::DeadLetter,
        RecordType::PlannerCheckpoint,
        RecordType::DetectorRound,
    ];

    /// The record's name, as in the schema and in `topology/topics.toml`.
    pub fn name(self) -> &'static str {
        match self {
            RecordType::TelemetryBatch => "TelemetryBatch",
            RecordType::LogRecord => "LogRecord",
            RecordType::AgentEvent => "AgentEvent",
            RecordType::FailureEvent => "FailureEvent",
            RecordType::ClusterEvent => "ClusterEvent",
            RecordType::Decision => "Decision",
            RecordType::Command => "Command",
            RecordType::CommandResult => "CommandResult",
            RecordType::DeadLetter => "DeadLetter",
            RecordType::PlannerCheckpoint => "PlannerCheckpoint",
            RecordType::DetectorRound => "DetectorRound",
        }
    }

    pub fn from_name(name: &str) -> Option<RecordType> {
        RecordType::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The schema's JSON text, exactly as committed.
    pub fn schema_text(self) -> &'static str {
        match self {
            RecordType::TelemetryBatch => include_str!("../../../schemas/TelemetryBatch.avsc"),
            RecordType::LogRecord => include_str!("../../../schemas/LogRecord.avsc"),
            RecordType::AgentEvent => include_str!("../../../schemas/AgentEvent.avsc"),
            RecordType::FailureEvent => include_str!("../../../schemas/FailureEvent.avsc"),
            RecordType::ClusterEvent => include_str!("../../../schemas/ClusterEvent.avsc"),
            RecordType::Decision => include_str!("../../../schemas/Decision.avsc"),
            RecordType::Command => include_str!("../../../schemas/Command.avsc"),
            RecordType::CommandResult => include_str!("../../../schemas/CommandResult.avsc"),
            RecordType::DeadLetter => include_str!("../../../schemas/DeadLetter.avsc"),
            RecordType::PlannerCheckpoint => {
                include_str!("../../../schemas/PlannerCheckpoint.avsc")
            }
            RecordType::DetectorRound => include_str!("../../../schemas/DetectorRound.avsc"),
        }
    }

    /// The parsed schema. The committed files are tested to parse, so a
    /// failure here is a build defect, not bad input.
    pub fn schema(self) -> &'static Schema {
        static PARSED: LazyLock<Vec<Schema>> = LazyLock::new(|| {
            RecordType::ALL
                .iter()
                .map(|r| {
                    Schema::parse_str(r.schema_text())
                        .unwrap_or_else(|e| panic!("schemas/{}.avsc: {e}", r.name()))
                })
                .collect()
        });
        &PARSED[self as usize]
    }
}

/// Reads one record of the current schema's binary encoding at the cursor.
pub type DirectDecoder<T> = fn(&mut Cursor<'_>) -> Result<T, String>;

/// Ties a core record type to its schema.
pub trait AvroRecord: serde::Serialize + serde::de::DeserializeOwned + 'static {
    const RECORD: RecordType;
    /// The direct decoder of the high-volume records (`direct_decode`);
    /// `None` for the others, which apache-avro decodes.
    const DIRECT_DECODER: Option<DirectDecoder<Self>> = None;
}

/// `bytes` decoded directly as `T` if `T` is one of the high-volume
/// records and the bytes are a complete, valid datum of it; `None` sends the
/// caller to apache-avro.
pub fn decode_datum<T: AvroRecord>(bytes: &[u8]) -> Option<T> {
    let decoder = T::DIRECT_DECODER?;
    let mut c = Cursor::new(bytes);
    let record = decoder(&mut c).ok()?;
    c.is_empty().then_some(record)
}

macro_rules! avro_record {
    ($($t:ident),*) => {
        $(impl AvroRecord for unicron_core::$t {
            const RECORD: RecordType = RecordType::$t;
        })*
    };
}

avro_record!(
    LogRecord,
    FailureEvent,
    ClusterEvent,
    Decision,
    Command,
    CommandResult,
    DeadLetter,
    PlannerCheckpoint,
    DetectorRound
);

impl AvroRecord for unicron_core::TelemetryBatch {
    const RECORD: RecordType = RecordType::TelemetryBatch;
    const DIRECT_DECODER: Option<DirectDecoder<Self>> = Some(direct_decode::telemetry_batch);
}

impl AvroRecord for unicron_core::AgentEvent {
    const RECORD: RecordType = RecordType::AgentEvent;
    const DIRECT_DECODER: Option<DirectDecoder<Self>> = Some(direct_decode::agent_event);
}
