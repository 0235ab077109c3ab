//! The few messages of Prometheus remote write 1.0, written out by hand
//! with prost's derive instead of generated: `WriteRequest` from
//! `prometheus/prompb/remote.proto`, `TimeSeries`, `Label` and `Sample`
//! from `prometheus/prompb/types.proto` (the Prometheus repository). Fields
//! this receiver does not read (metadata's contents, exemplars, histograms)
//! are left out; protobuf skips unknown fields when decoding.

/// `prometheus.WriteRequest`: one HTTP request's series.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    /// Metric metadata (type, help), sent in requests of their own; read
    /// only so that such a request is recognised as one.
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// `prometheus.TimeSeries`: one series' labels (`__name__` among them) and
/// samples, oldest first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`: a value at a time in ms since the Unix epoch.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// `prometheus.MetricMetadata`, only its metric name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricMetadata {
    #[prost(string, tag = "4")]
    pub metric_family_name: String,
}

/// The value Prometheus writes to mark a series stale (gone from its
/// target): one particular NaN (`value.StaleNaN` in Prometheus).
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Whether `value` is Prometheus' stale marker, not an ordinary NaN.
pub fn is_stale_marker(value: f64) -> bool {
    value.to_bits() == STALE_NAN_BITS
}
