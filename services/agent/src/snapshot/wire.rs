//! The snapshot protocol, on the local socket (worker ↔ agent) and on TCP
//! (agent ↔ agent): one JSON header line, then `len` bytes of payload. A
//! header between agents carries an HMAC-SHA256 under the cluster's
//! secret over every header field, the payload's digest included, so a
//! verified header and a payload matching its digest are authentic. The
//! digest is [`super::digest`] (chunked XXH3-128, at memory speed where
//! SHA-256 does about 0.5 GB/s a core).

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};

use super::mapped::Mapped;

/// Longest header line accepted.
const MAX_HEADER: usize = 64 * 1024;

/// One message's header.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Header {
    /// `save`, `restore`, `replica`, `fetch`, or `reply`.
    pub op: String,
    pub ok: bool,
    pub reason: String,
    pub job: String,
    pub rank: i32,
    pub step: i64,
    pub generation: i64,
    pub local_world: i32,
    /// Payload bytes that follow.
    pub len: u64,
    /// The payload's digest ([`super::digest`]), hex.
    pub digest: String,
    /// The sending node (between agents).
    pub from: String,
    /// `memory`, `replica:<node>` or `checkpoint` (restore replies).
    pub source: String,
    /// HMAC-SHA256 of the fields above, hex (between agents).
    pub mac: String,
    /// The worker's id of the slot a `save` hands over (local socket).
    pub slot: u64,
    /// How many slots the worker has (ids `0..slots`), on a `save`.
    pub slots: u64,
    /// A `save` reply: the worker's slots nothing in the agent holds any
    /// more (not signed: local socket only).
    pub released: Vec<u64>,
    /// A `save`: microseconds the worker's training thread spent copying
    /// this snapshot (local socket only).
    pub block_us: i64,
    /// A `save`: the worker's mean training step, microseconds (local
    /// socket only).
    pub step_us: i64,
}

/// A protocol error; the connection is dropped after it.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("connection closed")]
    Closed,
    #[error("truncated: {got} of {expected} payload bytes arrived")]
    Truncated { got: u64, expected: u64 },
    #[error("bad header: {0}")]
    BadHeader(String),
    #[error("checksum mismatch: the payload is not what its header says")]
    Checksum,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl Header {
    fn signed_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        for field in [
            self.op.as_bytes(),
            &[u8::from(self.ok)],
            self.reason.as_bytes(),
            self.job.as_bytes(),
            &self.rank.to_be_bytes(),
            &self.step.to_be_bytes(),
            &self.generation.to_be_bytes(),
            &self.local_world.to_be_bytes(),
            &self.len.to_be_bytes(),
            self.digest.as_bytes(),
            self.from.as_bytes(),
            self.source.as_bytes(),
        ] {
            out.extend_from_slice(&(field.len() as u64).to_be_bytes());
            out.extend_from_slice(field);
        }
        out
    }

    fn mac_of(&self, secret: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
        mac.update(b"unicron.snapshot.v2");
        mac.update(&self.signed_bytes());
        mac
    }

    /// Sets `mac` under `secret`.
    pub fn sign(&mut self, secret: &[u8]) {
        self.mac = hex::encode(self.mac_of(secret).finalize().into_bytes());
    }

    /// Whether `mac` is right under `secret` (constant time).
    pub fn verify(&self, secret: &[u8]) -> bool {
        let Ok(mac) = hex::decode(&self.mac) else {
            return false;
        };
        self.mac_of(secret).verify_slice(&mac).is_ok()
    }
}

/// Reads one header line; `Closed` at a clean end of stream.
pub async fn read_header(reader: &mut (impl AsyncBufRead + Unpin)) -> Result<Header, WireError> {
    let mut line = Vec::with_capacity(256);
    let n = (&mut *reader)
        .take(MAX_HEADER as u64 + 1)
        .read_until(b'\n', &mut line)
        .await?;
    if n == 0 {
        return Err(WireError::Closed);
    }
    if line.last() != Some(&b'\n') {
        return Err(if line.len() > MAX_HEADER {
            WireError::BadHeader(format!("longer than {MAX_HEADER} bytes"))
        } else {
            WireError::Closed
        });
    }
    serde_json::from_slice(&line).map_err(|e| WireError::BadHeader(e.to_string()))
}

/// A payload read whole (into a memfd of the agent's), with its digest.
pub struct Payload {
    pub data: Mapped,
    pub digest: String,
}

/// Reads the `len` payload bytes of `header` into a memfd (`spare`, or a
/// new one) and digests them; a header that names a digest must match it.
pub async fn read_payload(
    reader: &mut (impl AsyncBufRead + Unpin),
    header: &Header,
    max: u64,
    spare: Option<std::fs::File>,
) -> Result<Payload, WireError> {
    if header.len > max {
        return Err(WireError::BadHeader(format!(
            "payload of {} bytes is over the {max} bytes allowed",
            header.len
        )));
    }
    let (data, digest) = receive(reader, header.len, spare).await?;
    if !header.digest.is_empty() && digest != header.digest {
        return Err(WireError::Checksum);
    }
    Ok(Payload { data, digest })
}

/// Reads `len` bytes from `reader` into a memfd: a replica or a
/// fetched snapshot, written once, in place. Returns it with its
/// digest ([`super::digest`]), computed over each read while its
/// bytes are still in cache, so no second pass follows the transfer.
async fn receive(
    reader: &mut (impl AsyncRead + Unpin),
    len: u64,
    spare: Option<std::fs::File>,
) -> Result<(Mapped, String), WireError> {
    let (file, mut map) = Mapped::create(len, spare)?;
    let mut digest = super::digest::Streaming::default();
    if let Some(map) = map.as_mut() {
        let mut got = 0;
        while got < map.len() {
            let n = reader.read(&mut map[got..]).await?;
            if n == 0 {
                return Err(WireError::Truncated {
                    got: got as u64,
                    expected: len,
                });
            }
            digest.update(&map[got..got + n]);
            got += n;
        }
    }
    let digest = digest.finish();
    Ok((Mapped::seal(file, map)?, digest))
}

/// Reads a payload from another agent: its (signed) header must name the
/// digest, and the bytes must match it.
pub async fn read_peer_payload(
    reader: &mut (impl AsyncBufRead + Unpin),
    header: &Header,
    max: u64,
    spare: Option<std::fs::File>,
) -> Result<Payload, WireError> {
    if header.digest.is_empty() {
        return Err(WireError::BadHeader("no payload digest".into()));
    }
    read_payload(reader, header, max, spare).await
}

/// Writes a header line and its payload.
pub async fn write(
    writer: &mut (impl AsyncWrite + Unpin),
    header: &Header,
    payload: &[u8],
) -> Result<(), WireError> {
    let mut line = serde_json::to_vec(header).expect("a header serialises");
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.write_all(payload).await?;
    writer.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::digest::of as digest_hex;

    #[test]
    fn a_mac_covers_every_field() {
        let mut h = Header {
            op: "replica".into(),
            job: "j".into(),
            rank: 1,
            step: 7,
            digest: digest_hex(b"x"),
            from: "n1".into(),
            ..Header::default()
        };
        h.sign(b"secret-secret-secret-secret-secret");
        assert!(h.verify(b"secret-secret-secret-secret-secret"));
        assert!(!h.verify(b"another-secret-another-secret-000"));
        let mut other = h.clone();
        other.step = 8;
        assert!(!other.verify(b"secret-secret-secret-secret-secret"));
        let mut other = h.clone();
        other.from = "n3".into();
        assert!(!other.verify(b"secret-secret-secret-secret-secret"));
    }

    #[tokio::test]
    async fn a_short_or_altered_payload_is_refused() {
        let data = b"0123456789".to_vec();
        let header = Header {
            len: 10,
            digest: digest_hex(&data),
            ..Header::default()
        };
        let mut short = &data[..6];
        let mut reader = tokio::io::BufReader::new(&mut short);
        assert!(matches!(
            read_payload(&mut reader, &header, 100, None).await,
            Err(WireError::Truncated {
                got: 6,
                expected: 10
            })
        ));
        let mut altered = b"0123456780".to_vec();
        let mut slice = &altered[..];
        let mut reader = tokio::io::BufReader::new(&mut slice);
        assert!(matches!(
            read_payload(&mut reader, &header, 100, None).await,
            Err(WireError::Checksum)
        ));
        altered.clear();
    }

    /// A worker may leave the digest to the agent; another agent may not.
    #[tokio::test]
    async fn the_digest_is_computed_for_workers_and_required_of_peers() {
        let data = b"0123456789".to_vec();
        let header = Header {
            len: 10,
            ..Header::default()
        };
        let mut slice = &data[..];
        let mut reader = tokio::io::BufReader::new(&mut slice);
        let got = read_payload(&mut reader, &header, 100, None).await.unwrap();
        assert_eq!(got.digest, digest_hex(&data));
        assert_eq!(got.digest.len(), 32);
        let mut slice = &data[..];
        let mut reader = tokio::io::BufReader::new(&mut slice);
        assert!(matches!(
            read_peer_payload(&mut reader, &header, 100, None).await,
            Err(WireError::BadHeader(_))
        ));
    }

    /// A spare memfd, larger or smaller than the payload, holds exactly the
    /// payload once received into.
    #[tokio::test]
    async fn a_spare_memfd_is_resized_to_the_payload_it_receives() {
        for old in [vec![7u8; 4096 * 3], vec![7u8; 3]] {
            let spare = Mapped::from_bytes(&old).unwrap().into_spare().unwrap();
            let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
            let header = Header {
                len: data.len() as u64,
                digest: digest_hex(&data),
                ..Header::default()
            };
            let mut slice = &data[..];
            let mut reader = tokio::io::BufReader::new(&mut slice);
            let got = read_payload(&mut reader, &header, 1 << 20, Some(spare))
                .await
                .unwrap();
            assert_eq!(&got.data[..], &data[..]);
            assert!(got.data.intact(&header.digest));
        }
    }
}
