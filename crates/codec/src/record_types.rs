//! unicron's record types and the topics that carry them, defined once.
//! Each line of the table below is a record type (a `unicron_core` type
//! and its `schemas/<Name>.avsc`), the one [`Topic`] that carries it with
//! that topic's name, and the record's direct decoder if it has one.
//! `RecordType::ALL`, `Topic::ALL`, names, schemas, the record ↔ topic
//! maps, the `AvroRecord` impls and [`RecordType::with`] (code generic
//! over records, run for a type known at run time) all come from it;
//! adding a record type is a line here plus its schema file.

use crate::direct_decode::{self, Cursor};

/// Reads one record of the current schema's binary encoding at the cursor.
pub type DirectDecoder<T> = fn(&mut Cursor<'_>) -> Result<T, String>;

/// Ties a core record type to its schema.
pub trait AvroRecord: serde::Serialize + serde::de::DeserializeOwned + 'static {
    const RECORD: RecordType;
    /// The direct decoder of the high-volume records (`direct_decode`);
    /// `None` for the others, which apache-avro decodes.
    const DIRECT_DECODER: Option<DirectDecoder<Self>> = None;
}

/// Code generic over the record types, run by [`RecordType::with`] for a
/// record type known only at run time.
pub trait ForRecord {
    type Output;
    fn run<T: AvroRecord + PartialEq + std::fmt::Debug>(self) -> Self::Output;
}

macro_rules! record_types {
    ($($record:ident => $topic:ident = $suffix:literal $(, direct: $direct:path)?;)*) => {
        /// A record type of docs/design.md §3 and the `.avsc` file that defines it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum RecordType {
            $($record,)*
        }

        /// A topic of the topology (`topology/topics.toml`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Topic {
            $($topic,)*
        }

        /// How many record types (and topics) there are.
        pub const COUNT: usize = [$(stringify!($record)),*].len();

        impl RecordType {
            pub const ALL: [RecordType; COUNT] = [$(RecordType::$record,)*];

            /// The record's name, as in the schema and in `topology/topics.toml`.
            pub fn name(self) -> &'static str {
                match self {
                    $(RecordType::$record => stringify!($record),)*
                }
            }

            /// The schema's JSON text, exactly as committed.
            pub fn schema_text(self) -> &'static str {
                match self {
                    $(RecordType::$record => include_str!(concat!(
                        "../../../schemas/", stringify!($record), ".avsc"
                    )),)*
                }
            }

            /// Runs `f` for this record type's Rust type.
            pub fn with<F: ForRecord>(self, f: F) -> F::Output {
                match self {
                    $(RecordType::$record => f.run::<unicron_core::$record>(),)*
                }
            }
        }

        impl Topic {
            pub const ALL: [Topic; COUNT] = [$(Topic::$topic,)*];

            /// The name without the prefix, as in `topology/topics.toml`.
            pub fn suffix(self) -> &'static str {
                match self {
                    $(Topic::$topic => $suffix,)*
                }
            }

            /// The one record type the topic carries.
            pub fn record(self) -> RecordType {
                match self {
                    $(Topic::$topic => RecordType::$record,)*
                }
            }

            /// The topic that carries `record`: each record type has exactly
            /// one, so a record's type names its topic.
            pub fn carrying(record: RecordType) -> Topic {
                match record {
                    $(RecordType::$record => Topic::$topic,)*
                }
            }
        }

        $(impl AvroRecord for unicron_core::$record {
            const RECORD: RecordType = RecordType::$record;
            $(const DIRECT_DECODER: Option<DirectDecoder<Self>> = Some($direct);)?
        })*
    };
}

record_types! {
    TelemetryBatch => Telemetry = "telemetry", direct: direct_decode::telemetry_batch;
    LogRecord => Logs = "logs";
    AgentEvent => Agent = "agent", direct: direct_decode::agent_event;
    FailureEvent => Failures = "failures";
    ClusterEvent => Cluster = "cluster";
    Decision => Decisions = "decisions";
    Command => Commands = "commands";
    CommandResult => CommandResults = "command-results";
    DeadLetter => Dlq = "dlq";
    PlannerCheckpoint => PlannerCheckpoints = "planner-checkpoints";
    DetectorRound => DetectorRounds = "detector-rounds";
}
