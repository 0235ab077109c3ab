//! Helpers shared by the binary's integration tests.
#![allow(dead_code)]

use std::io::{Read, Write};

/// A plain HTTP/1.1 GET; the whole reply, status line first.
pub fn http_get(address: &str, path: &str) -> String {
    let mut stream =
        std::net::TcpStream::connect(address).unwrap_or_else(|e| panic!("connect {address}: {e}"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

/// Stops the child on every exit path, a failed assertion included.
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `command` and waits up to `within` for it to accept TCP
/// connections on `addr`; stopped when the guard drops.
pub fn spawn_listening(
    command: &mut std::process::Command,
    addr: std::net::SocketAddr,
    within: std::time::Duration,
) -> Running {
    let what = command.get_program().to_string_lossy().into_owned();
    let child = command
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e} (.ci/run installs it)"));
    let running = Running(child);
    let started = std::time::Instant::now();
    let poll = std::time::Duration::from_millis(200);
    while std::net::TcpStream::connect_timeout(&addr, poll).is_err() {
        assert!(
            started.elapsed() < within,
            "{what} did not listen on {addr}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    running
}
