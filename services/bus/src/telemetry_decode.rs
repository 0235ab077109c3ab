//! A direct decoder of `TelemetryBatch` from the Avro binary encoding, and
//! of archive files of them.
//!
//! Telemetry is most of unicron's volume, and apache-avro 0.21 decodes only
//! through its generic `Value` (every field name copied into every record),
//! which makes it the bottleneck of replay: about 8,500 batches of 41
//! samples per second. This decoder reads the current schema's encoding
//! straight into the record. It is used only when the writer schema is
//! exactly the current one; anything else (an older file, another schema)
//! goes through apache-avro and its schema resolution. Tests check it
//! against apache-avro on the same bytes.

use std::collections::BTreeMap;

use unicron_core::{MetricSample, TelemetryBatch};

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
        // A corrupt count must not reserve gigabytes: at least a byte each.
        samples.reserve(n.min(c.bytes.len() - c.at));
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
