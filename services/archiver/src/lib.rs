//! unicron-archiver: reads every unicron topic and writes it to Avro object
//! container files (`unicron_codec::archive`), the long-term audit record that
//! replay reads once Kafka retention has ended. A partition's offsets are
//! committed only up to the end of a closed file, so a crash never loses an
//! archived range and never leaves a gap. Operator docs: `docs/archive.md`.

mod error;
pub mod metrics;
mod service;
mod settings;

pub use self::metrics::METRICS;
pub use error::ArchiverError;
pub use service::run;
pub use settings::ArchiverSettings;
