//! librdkafka's cached high watermark of a partition. librdkafka caches it
//! from every fetch response; rdkafka wraps only the network query for it,
//! so this reads the cache through the C API. The crate's one `unsafe`.

use std::ffi::CString;

use rdkafka::bindings::{rd_kafka_get_watermark_offsets, rd_kafka_resp_err_t};
use rdkafka::client::{Client, ClientContext};

/// The partition's high watermark at `client`'s latest fetch, if known
/// (no I/O, no blocking).
pub(crate) fn cached_high_watermark<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let topic = CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: `client` is borrowed for the call, so its native handle is
    // live (rdkafka destroys it only when the client drops); librdkafka's
    // API may be called from any thread. `topic` is NUL-terminated and
    // outlives the call, which does not keep it; `low` and `high` are valid
    // for writes of an i64 each.
    let code = unsafe {
        rd_kafka_get_watermark_offsets(
            client.native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (code == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}
