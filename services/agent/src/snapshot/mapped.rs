//! Snapshot bytes in shared memory: a memfd mapped read-only. A worker's
//! snapshot is the very pages it wrote (its slot's memfd, passed over the
//! local socket), so handing it over copies nothing and it outlives the
//! worker; a replica from a peer is read from the socket straight into a
//! memfd of the agent's. Either is passed on as a descriptor to the worker
//! that restores it.
//!
//! The one place the agent maps memory, hence the one `unsafe`: a mapping
//! another process may still write. The agent only reads it as bytes (to
//! digest it, to send it), and every use is preceded by a digest check
//! against the digest taken at hand-over ([`Mapped::intact`]), so a slot
//! written after it was handed over is found and dropped, never restored.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::{Mmap, MmapMut, MmapOptions};
use rustix::fs::{
    FileType, MemfdFlags, SealFlags, fcntl_add_seals, fstat, ftruncate, memfd_create,
};

/// Why a descriptor is not taken as a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("the descriptor is not a memfd or regular file")]
    NotAFile,
    #[error(
        "the descriptor cannot be sealed against shrinking (a memfd made with MFD_ALLOW_SEALING is needed): {0}"
    )]
    NotSealable(std::io::Error),
    #[error("the descriptor holds {size} bytes, the header announced {len}")]
    TooShort { size: u64, len: u64 },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// `len` bytes of a memfd (or regular file), mapped read-only.
#[derive(Debug)]
pub struct Mapped {
    file: File,
    /// `None` for an empty snapshot (nothing to map).
    map: Option<Mmap>,
    /// The agent made this memfd (a replica or a fetch), so once dropped
    /// it may hold another snapshot; a worker's slot never does.
    own: bool,
    /// A descriptor of it went to a worker, which may map it for as long
    /// as it likes: its bytes must never change again.
    lent: AtomicBool,
}

impl Mapped {
    /// A worker's slot: `fd` must be a memfd of at least `len` bytes; its
    /// first `len` bytes are the snapshot. It is sealed against shrinking
    /// first: a mapping past the end of a file that shrank would kill the
    /// agent with SIGBUS.
    pub fn from_worker(fd: OwnedFd, len: u64) -> Result<Mapped, MapError> {
        let stat = fstat(&fd).map_err(std::io::Error::from)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(MapError::NotAFile);
        }
        fcntl_add_seals(&fd, SealFlags::SHRINK)
            .map_err(|e| MapError::NotSealable(std::io::Error::from(e)))?;
        let stat = fstat(&fd).map_err(std::io::Error::from)?;
        let size = stat.st_size as u64;
        if size < len {
            return Err(MapError::TooShort { size, len });
        }
        let file = File::from(fd);
        let map = if len == 0 {
            None
        } else {
            // SAFETY: see the module doc: read as bytes only, checked by
            // digest before every use. Populated: the worker's pages are
            // mapped in one go, not faulted in one at a time by the digest.
            Some(unsafe { MmapOptions::new().len(len as usize).populate().map(&file)? })
        };
        Ok(Mapped {
            file,
            map,
            own: false,
            lent: AtomicBool::new(false),
        })
    }

    /// A memfd of the agent's own holding `data` (tests, and a snapshot
    /// built in memory).
    pub fn from_bytes(data: &[u8]) -> Result<Mapped, std::io::Error> {
        let (file, mut map) = Self::create(data.len() as u64, None)?;
        if let Some(map) = map.as_mut() {
            map.copy_from_slice(data);
        }
        Self::seal(file, map)
    }

    /// A writable memfd of `len` bytes: `spare` (one [`Mapped::into_spare`]
    /// gave back, resized) when there is one, so its pages are already
    /// made and a replica lands at copy speed, else a new one.
    pub(super) fn create(
        len: u64,
        spare: Option<File>,
    ) -> Result<(File, Option<MmapMut>), std::io::Error> {
        let file = match spare {
            Some(file) => file,
            None => File::from(memfd_create("unicron-snapshot", MemfdFlags::CLOEXEC)?),
        };
        ftruncate(&file, len)?;
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the agent's own memfd, not shared with anyone: a new
            // one, or a spare no worker ever saw and nothing maps.
            // Populated: its pages are made in one go, not faulted in one
            // at a time under the socket reads that fill them.
            Some(unsafe { MmapOptions::new().populate().map_mut(&file)? })
        };
        Ok((file, map))
    }

    pub(super) fn seal(file: File, map: Option<MmapMut>) -> Result<Mapped, std::io::Error> {
        let map = map.map(MmapMut::make_read_only).transpose()?;
        Ok(Mapped {
            file,
            map,
            own: true,
            lent: AtomicBool::new(false),
        })
    }

    /// A descriptor of the same memory, to pass to a restoring worker.
    /// From then on the memory is never reused.
    pub fn descriptor(&self) -> Result<OwnedFd, std::io::Error> {
        self.lent.store(true, Ordering::Relaxed);
        self.file.as_fd().try_clone_to_owned()
    }

    /// The memfd, unmapped, to receive another snapshot into: only one the
    /// agent made and never lent to a worker (nobody else can map it).
    pub(super) fn into_spare(self) -> Option<File> {
        (self.own && !self.lent.load(Ordering::Relaxed) && self.map.is_some()).then_some(self.file)
    }

    /// Whether the bytes still have `digest` (the one taken at hand-over).
    pub fn intact(&self, digest: &str) -> bool {
        super::digest::of(self) == digest
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}
