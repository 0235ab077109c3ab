//! The archiver's metrics, each declared once (see `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Records in closed archive files, by topic.
pub const RECORDS: Metric = Metric::counter(
    "unicron_archiver_records_total",
    "Records archived in closed files, by topic.",
);
/// Archive files closed, by topic.
pub const FILES: Metric = Metric::counter(
    "unicron_archiver_files_total",
    "Archive files closed, by topic.",
);
/// Bytes of closed files as on disk, by topic.
pub const BYTES: Metric = Metric::counter(
    "unicron_archiver_bytes_total",
    "Bytes of closed archive files (compressed, as on disk), by topic.",
);

/// Every metric the archiver exports.
pub const METRICS: &[Metric] = &[RECORDS, FILES, BYTES];
