//! The local socket's framing: JSON header lines, each with the
//! descriptors that came with it (SCM_RIGHTS). A worker hands over a
//! snapshot as one line and its slot's memfd; a restore is answered with
//! one line and the snapshot's memfd. No payload bytes cross the socket.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use tokio::io::Interest;
use tokio::net::UnixStream;

use super::wire::{Header, WireError};

/// Longest header line accepted.
const MAX_LINE: usize = 64 * 1024;
/// Most descriptors one read may carry.
const MAX_FDS: usize = 4;

/// Header lines from a Unix stream, with the descriptors that arrived.
pub struct FdLines<'a> {
    stream: &'a UnixStream,
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

impl<'a> FdLines<'a> {
    pub fn new(stream: &'a UnixStream) -> FdLines<'a> {
        FdLines {
            stream,
            buf: Vec::new(),
            fds: VecDeque::new(),
        }
    }

    /// The next header; `Closed` at a clean end of stream.
    pub async fn header(&mut self) -> Result<Header, WireError> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                return serde_json::from_slice(&line)
                    .map_err(|e| WireError::BadHeader(e.to_string()));
            }
            if self.buf.len() > MAX_LINE {
                return Err(WireError::BadHeader(format!(
                    "longer than {MAX_LINE} bytes"
                )));
            }
            let mut chunk = [0u8; 8192];
            let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let stream = self.stream;
            let (n, fds) = stream
                .async_io(Interest::READABLE, || {
                    let mut control = RecvAncillaryBuffer::new(&mut space);
                    let got = recvmsg(
                        stream,
                        &mut [IoSliceMut::new(&mut chunk)],
                        &mut control,
                        RecvFlags::CMSG_CLOEXEC,
                    )?;
                    let mut fds = Vec::new();
                    for message in control.drain() {
                        if let RecvAncillaryMessage::ScmRights(rights) = message {
                            fds.extend(rights);
                        }
                    }
                    Ok((got.bytes, fds))
                })
                .await?;
            self.fds.extend(fds);
            if n == 0 {
                return Err(if self.buf.is_empty() {
                    WireError::Closed
                } else {
                    WireError::Truncated {
                        got: self.buf.len() as u64,
                        expected: self.buf.len() as u64 + 1,
                    }
                });
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The oldest descriptor received and not yet taken.
    pub fn descriptor(&mut self) -> Option<OwnedFd> {
        self.fds.pop_front()
    }

    /// Drops descriptors nobody took (a line that should have carried none).
    pub fn drop_descriptors(&mut self) {
        self.fds.clear();
    }
}

/// Writes one header line, with `fd` attached if given.
pub async fn send(
    stream: &UnixStream,
    header: &Header,
    fd: Option<&OwnedFd>,
) -> Result<(), WireError> {
    let mut line = serde_json::to_vec(header).expect("a header serialises");
    line.push(b'\n');
    let mut sent = 0;
    while sent < line.len() {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let fds = fd.map(|f| [f.as_fd()]);
        let n = stream
            .async_io(Interest::WRITABLE, || {
                let mut control = SendAncillaryBuffer::new(&mut space);
                // The descriptor goes with the first byte only.
                if let (0, Some(fds)) = (sent, fds.as_ref()) {
                    control.push(SendAncillaryMessage::ScmRights(fds));
                }
                Ok(sendmsg(
                    stream,
                    &[IoSlice::new(&line[sent..])],
                    &mut control,
                    SendFlags::NOSIGNAL,
                )?)
            })
            .await?;
        sent += n;
    }
    Ok(())
}
