//! The snapshot digest: XXH3-128 over the XXH3-128s of its 64-MiB chunks,
//! 32 hex digits. Chunked so that a large snapshot is digested by several
//! threads at once (one core reads memory at about 7 GB/s on a VM, well
//! under what the memory bus gives two) and a received one chunk by chunk
//! while its bytes are still in cache. It detects damage; authenticity
//! between agents comes from the HMAC over it.

use xxhash_rust::xxh3::{Xxh3, xxh3_128};

/// Bytes per chunk.
pub const CHUNK: usize = 64 << 20;

/// Threads at most for one digest.
const THREADS: usize = 4;

/// The digest of `data`, on up to [`THREADS`] threads.
pub fn of(data: &[u8]) -> String {
    chunked(data, CHUNK)
}

fn chunked(data: &[u8], chunk: usize) -> String {
    let chunks = data.len().div_ceil(chunk).max(1);
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(THREADS)
        .min(chunks);
    let sums: Vec<u128> = if threads <= 1 {
        chunk_sums(data, chunk)
    } else {
        // Contiguous runs of whole chunks, one per thread.
        let per = chunks.div_ceil(threads) * chunk;
        std::thread::scope(|scope| {
            let runs: Vec<_> = data
                .chunks(per)
                .map(|run| scope.spawn(move || chunk_sums(run, chunk)))
                .collect();
            runs.into_iter()
                .flat_map(|run| run.join().expect("a digest thread does not panic"))
                .collect()
        })
    };
    finish(&sums)
}

fn chunk_sums(data: &[u8], chunk: usize) -> Vec<u128> {
    if data.is_empty() {
        return vec![xxh3_128(&[])];
    }
    data.chunks(chunk).map(xxh3_128).collect()
}

fn finish(sums: &[u128]) -> String {
    let bytes: Vec<u8> = sums.iter().flat_map(|s| s.to_be_bytes()).collect();
    format!("{:032x}", xxh3_128(&bytes))
}

/// The same digest, taken over bytes as they arrive in order.
pub struct Streaming {
    chunk: usize,
    current: Xxh3,
    in_chunk: usize,
    sums: Vec<u128>,
}

impl Default for Streaming {
    fn default() -> Streaming {
        Streaming::with_chunk(CHUNK)
    }
}

impl Streaming {
    fn with_chunk(chunk: usize) -> Streaming {
        Streaming {
            chunk,
            current: Xxh3::new(),
            in_chunk: 0,
            sums: Vec::new(),
        }
    }

    pub fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = bytes.len().min(self.chunk - self.in_chunk);
            self.current.update(&bytes[..take]);
            self.in_chunk += take;
            bytes = &bytes[take..];
            if self.in_chunk == self.chunk {
                self.sums.push(self.current.digest128());
                self.current.reset();
                self.in_chunk = 0;
            }
        }
    }

    pub fn finish(mut self) -> String {
        if self.in_chunk > 0 || self.sums.is_empty() {
            self.sums.push(self.current.digest128());
        }
        finish(&self.sums)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small chunks, so every boundary case is cheap to reach.
    const C: usize = 1024;

    #[test]
    fn the_parallel_and_streaming_digests_agree_at_every_boundary() {
        let big: Vec<u8> = (0..9 * C + 5).map(|i| (i % 251) as u8).collect();
        for len in [0, 1, C - 1, C, C + 1, 2 * C, 9 * C + 5] {
            let data = &big[..len];
            let mut streaming = Streaming::with_chunk(C);
            // Pieces that straddle chunk boundaries.
            for piece in data.chunks(700) {
                streaming.update(piece);
            }
            assert_eq!(streaming.finish(), chunked(data, C), "{len} bytes");
        }
        assert_ne!(chunked(&big[..C], C), chunked(&big[..C + 1], C));
        let mut altered = big[..2 * C].to_vec();
        altered[C + 3] ^= 1;
        assert_ne!(chunked(&altered, C), chunked(&big[..2 * C], C));
        // The real chunk size, one chunk and a bit.
        let data = vec![3u8; CHUNK + 1];
        let mut streaming = Streaming::default();
        streaming.update(&data);
        assert_eq!(streaming.finish(), of(&data));
    }
}
