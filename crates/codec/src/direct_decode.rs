//! Direct decoders of the two high-volume records, `TelemetryBatch` and
//! `AgentEvent`, from the Avro binary encoding.
//!
//! They are most of unicron's volume, and apache-avro 0.21 decodes only
//! through its generic `Value` (every field name copied into every record),
//! which made it the bottleneck of replay: about 8,500 telemetry batches of
//! 41 samples per second. These decoders read the current schema's encoding
//! straight into the record. It is used only when the writer schema is
//! exactly the current one; anything else (an older file, another schema)
//! goes through apache-avro and its schema resolution. Tests check it
//! against apache-avro on the same bytes.

use std::collections::BTreeMap;

use unicron_core::{
    AgentEvent, AgentEventKind, MetricSample, TelemetryBatch, WorkerChange, WorkerReport,
};

/// Reads the primitives of the Avro binary encoding from a byte slice.
pub struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

type Result<T> = std::result::Result<T, String>;

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, at: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    pub fn position(&self) -> usize {
        self.at
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    /// A zig-zag varint `long` (also `int`, and every length and count).
    pub fn long(&mut self) -> Result<i64> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *self.bytes.get(self.at).ok_or("truncated varint")?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    pub fn int(&mut self) -> Result<i32> {
        i32::try_from(self.long()?).map_err(|_| "int out of range".to_string())
    }

    pub fn double(&mut self) -> Result<f64> {
        let raw = self.take(8)?;
        Ok(f64::from_le_bytes(raw.try_into().expect("8 bytes")))
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or("length overflow")?;
        let out = self.bytes.get(self.at..end).ok_or("truncated data")?;
        self.at = end;
        Ok(out)
    }

    fn length(&mut self) -> Result<usize> {
        usize::try_from(self.long()?).map_err(|_| "negative length".to_string())
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.length()?;
        self.take(n)
    }

    pub fn string(&mut self) -> Result<String> {
        let raw = self.bytes()?;
        String::from_utf8(raw.to_vec()).map_err(|_| "string is not UTF-8".to_string())
    }

    /// The branch of a two-branch union whose first branch is `null`.
    pub fn optional(&mut self) -> Result<bool> {
        match self.long()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("union branch {other} of a nullable")),
        }
    }

    /// Item count of the next array or map block (0 ends it); a negative
    /// count is followed by the block's size in bytes, which we do not need.
    fn block(&mut self) -> Result<usize> {
        let count = self.long()?;
        if count < 0 {
            self.long()?;
        }
        usize::try_from(count.unsigned_abs()).map_err(|_| "block too large".to_string())
    }
}

/// The fewest bytes a `MetricSample` takes: empty name, the 8-byte double,
/// a one-byte time, three null unions and the end of an empty map.
const MIN_SAMPLE_BYTES: usize = 14;

fn sample(c: &mut Cursor<'_>) -> Result<MetricSample> {
    let name = c.string()?;
    let value = c.double()?;
    let time_ms = c.long()?;
    let gpu = if c.optional()? { Some(c.int()?) } else { None };
    let job = if c.optional()? {
        Some(c.string()?)
    } else {
        None
    };
    let rank = if c.optional()? { Some(c.int()?) } else { None };
    let mut labels = BTreeMap::new();
    loop {
        let n = c.block()?;
        if n == 0 {
            break;
        }
        for _ in 0..n {
            let key = c.string()?;
            labels.insert(key, c.string()?);
        }
    }
    Ok(MetricSample {
        name,
        value,
        time_ms,
        gpu,
        job,
        rank,
        labels,
    })
}

/// One `TelemetryBatch` at the cursor.
pub fn telemetry_batch(c: &mut Cursor<'_>) -> Result<TelemetryBatch> {
    let cluster = c.string()?;
    let node = c.string()?;
    let source = c.string()?;
    let mut samples = Vec::new();
    loop {
        let n = c.block()?;
        if n == 0 {
            break;
        }
        // A corrupt count must not reserve what it claims: reserve no more
        // samples than the bytes left could hold.
        samples.reserve(n.min(c.remaining() / MIN_SAMPLE_BYTES));
        for _ in 0..n {
            samples.push(sample(c)?);
        }
    }
    Ok(TelemetryBatch {
        cluster,
        node,
        source,
        samples,
    })
}

fn optional<'a, T>(
    c: &mut Cursor<'a>,
    read: impl FnOnce(&mut Cursor<'a>) -> Result<T>,
) -> Result<Option<T>> {
    if c.optional()? {
        read(c).map(Some)
    } else {
        Ok(None)
    }
}

/// One `AgentEvent` at the cursor.
pub fn agent_event(c: &mut Cursor<'_>) -> Result<AgentEvent> {
    Ok(AgentEvent {
        cluster: c.string()?,
        node: c.string()?,
        time_ms: c.long()?,
        kind: match c.long()? {
            0 => AgentEventKind::Heartbeat,
            1 => AgentEventKind::ProcessExit,
            2 => AgentEventKind::IterationDone,
            3 => AgentEventKind::Unknown,
            4 => AgentEventKind::Leaving,
            other => return Err(format!("AgentEventKind symbol {other}")),
        },
        job: optional(c, Cursor::string)?,
        rank: optional(c, Cursor::int)?,
        exit_code: optional(c, Cursor::int)?,
        signal: optional(c, Cursor::int)?,
        iteration: optional(c, Cursor::long)?,
        iteration_time_ms: optional(c, Cursor::double)?,
        compute_ms: optional(c, Cursor::double)?,
        idle_tick: match c.take(1)? {
            [0] => false,
            [1] => true,
            other => return Err(format!("boolean byte {other:?}")),
        },
        worker: optional(c, worker_report)?,
    })
}

fn worker_report(c: &mut Cursor<'_>) -> Result<WorkerReport> {
    Ok(WorkerReport {
        change: match c.long()? {
            0 => WorkerChange::Started,
            1 => WorkerChange::State,
            2 => WorkerChange::Stopped,
            3 => WorkerChange::Unknown,
            other => return Err(format!("WorkerChange symbol {other}")),
        },
        generation: c.long()?,
        pid: c.int()?,
        command_id: optional(c, Cursor::string)?,
        process_state: optional(c, Cursor::string)?,
    })
}

/// One complete datum; trailing bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<TelemetryBatch> {
    let mut c = Cursor::new(bytes);
    let batch = telemetry_batch(&mut c)?;
    if !c.is_empty() {
        return Err(format!("{} trailing bytes", bytes.len() - c.position()));
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::AvroCodec;

    fn batch(samples: usize) -> TelemetryBatch {
        TelemetryBatch {
            cluster: "c-ü".into(),
            node: "node-1".into(),
            source: "dcgm".into(),
            samples: (0..samples)
                .map(|i| MetricSample {
                    name: format!("DCGM_FI_DEV_{i}"),
                    value: match i % 4 {
                        0 => -1.5e300,
                        1 => f64::INFINITY,
                        2 => 0.0,
                        _ => i as f64 / 3.0,
                    },
                    time_ms: 1_767_225_600_000 - (i as i64) * 1_000_003,
                    gpu: (i % 2 == 0).then_some(i as i32 - 3),
                    job: (i % 3 == 0).then(|| format!("job-{i}")),
                    rank: (i % 5 == 0).then_some(i32::MIN + i as i32),
                    labels: (0..i % 3)
                        .map(|k| (format!("k{k}"), format!("v{i}-{k}")))
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn decodes_what_apache_avro_encodes() {
        let codec = AvroCodec::<TelemetryBatch>::default();
        for n in [0, 1, 7, 64, 300] {
            let value = batch(n);
            let bytes = codec.encode(&value).unwrap();
            assert_eq!(decode(&bytes).unwrap(), value);
            assert_eq!(codec.decode(&bytes).unwrap(), value);
        }
    }

    #[test]
    fn agent_events_decode_as_apache_avro_encodes_them() {
        let codec = AvroCodec::<AgentEvent>::default();
        let kinds = [
            AgentEventKind::Heartbeat,
            AgentEventKind::ProcessExit,
            AgentEventKind::IterationDone,
            AgentEventKind::Unknown,
            AgentEventKind::Leaving,
        ];
        for (i, kind) in kinds.into_iter().enumerate() {
            let some = i % 2 == 0;
            let value = AgentEvent {
                cluster: "c".into(),
                node: format!("node-{i}"),
                time_ms: -(i as i64) * 77_777,
                kind,
                job: some.then(|| "job-0".into()),
                rank: some.then_some(i as i32),
                exit_code: (!some).then_some(-1),
                signal: some.then_some(15),
                iteration: (!some).then_some(i64::MAX),
                iteration_time_ms: some.then_some(1234.5),
                compute_ms: some.then_some(987.25),
                idle_tick: false,
                worker: None,
            };
            let bytes = codec.encode(&value).unwrap();
            let mut c = Cursor::new(&bytes);
            assert_eq!(agent_event(&mut c).unwrap(), value);
            assert!(c.is_empty());
        }
    }

    #[test]
    fn the_codec_takes_the_direct_path_and_reports_apache_avro_errors() {
        let codec = AvroCodec::<TelemetryBatch>::default();
        let bytes = codec.encode(&batch(3)).unwrap();
        assert_eq!(
            crate::schemas::decode_datum::<TelemetryBatch>(&bytes),
            Some(batch(3))
        );
        assert_eq!(codec.decode(&bytes).unwrap(), batch(3));
        let err = codec
            .decode(&bytes[..bytes.len() - 3])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("avro TelemetryBatch"), "{err}");
        assert_eq!(
            crate::schemas::decode_datum::<unicron_core::LogRecord>(&bytes),
            None
        );
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let bytes = AvroCodec::<TelemetryBatch>::default()
            .encode(&batch(5))
            .unwrap();
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode(&extra).unwrap_err().contains("trailing"));
        assert!(decode(&[0xff; 12]).is_err());
        // A huge sample count with no data behind it.
        let mut huge = AvroCodec::<TelemetryBatch>::default()
            .encode(&batch(0))
            .unwrap();
        huge.pop();
        huge.extend([0xfe, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode(&huge).is_err());
    }
}
