//! A record as a consumer hands it over: what every decoder and the
//! archive take, wherever it was read.

/// One record as read from Kafka, owned so it can outlive the consumer's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    /// The record's Kafka timestamp, ms since the Unix epoch, when it has one.
    pub timestamp_ms: Option<i64>,
    /// Nothing newer was on the partition when this record was fetched: the
    /// consumer has caught up with it. Event-time watermarks must not wait
    /// for a caught-up partition (it may be silent because its nodes died),
    /// and must wait for one that is behind.
    pub caught_up: bool,
}
