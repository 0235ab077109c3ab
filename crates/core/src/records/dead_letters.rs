//! Records a service could not use (`unicron.dlq`).

use serde::{Deserialize, Serialize};

/// A record a service could not use (`unicron.dlq`, key: source topic).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub source_topic: String,
    pub partition: i32,
    pub offset: i64,
    #[serde(default, with = "serde_bytes")]
    pub key: Option<Vec<u8>>,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    pub payload_size: i64,
    pub error: String,
    pub service: String,
    pub time_ms: i64,
}
