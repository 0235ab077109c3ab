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
