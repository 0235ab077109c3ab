//! An HTTP relay between the executor and the simulator. When armed, it
//! lets the simulator act on a request and then kills the executor before
//! the answer reaches it: the executor has acted and not yet published its
//! result, the one crash point a signal at a random time rarely hits.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Shared with the driver: arm it, and read how often it fired.
#[derive(Default)]
pub struct Trap {
    armed: AtomicBool,
    /// Pid of the executor to kill (0: none running).
    pub victim: AtomicU32,
    pub fired: AtomicU64,
}

impl Trap {
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }
}

/// Relays `listen` → `upstream` forever, one connection at a time.
pub fn start(upstream: SocketAddr, trap: Arc<Trap>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let trap = trap.clone();
            std::thread::spawn(move || {
                if let Err(e) = relay(client, upstream, &trap) {
                    tracing::debug!(error = %e, "relay");
                }
            });
        }
    });
    Ok(addr)
}

/// One request (read whole: headers and Content-Length body), forwarded
/// with `Connection: close`, and the whole answer back.
fn relay(client: TcpStream, upstream: SocketAddr, trap: &Trap) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    loop {
        let mut head = Vec::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(()); // the executor closed the connection
            }
            let lower = line.to_ascii_lowercase();
            if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("connection:") {
                continue;
            }
            if line == "\r\n" {
                head.extend_from_slice(b"Connection: close\r\n\r\n");
                break;
            }
            head.extend_from_slice(line.as_bytes());
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let mut server = TcpStream::connect(upstream)?;
        server.write_all(&head)?;
        server.write_all(&body)?;
        let answer = read_answer(&mut BufReader::new(server))?;
        if trap.armed.swap(false, Ordering::SeqCst) {
            let pid = trap.victim.load(Ordering::SeqCst);
            if pid != 0 {
                crate::procs::kill(pid, "KILL");
                trap.fired.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
        }
        (&client).write_all(&answer)?;
    }
}

/// One HTTP answer, read by its Content-Length (not to the end of the
/// connection, which a keep-alive server may hold open).
fn read_answer(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut answer = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("connection:") {
            continue; // the executor's connection stays open
        }
        answer.extend_from_slice(line.as_bytes());
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    answer.extend_from_slice(&body);
    Ok(answer)
}
