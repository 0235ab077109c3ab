//! Helpers shared by the binary's integration tests.
#![allow(dead_code)]

use std::io::{Read, Write};

/// A plain HTTP/1.1 GET; the whole reply, status line first.
pub fn http_get(address: &str, path: &str) -> String {
    http_get_with(address, path, "")
}

/// A plain HTTP/1.1 GET with extra headers (each ending in CRLF).
pub fn http_get_with(address: &str, path: &str, headers: &str) -> String {
    let mut stream =
        std::net::TcpStream::connect(address).unwrap_or_else(|e| panic!("connect {address}: {e}"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\n{headers}Connection: close\r\n\r\n"
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

/// Every record of `topic` that decodes as `T`, in partition order.
pub fn read<T: unicron_codec::schemas::AvroRecord>(brokers: &str, topic: &str) -> Vec<T> {
    let codec = unicron_codec::AvroCodec::<T>::default();
    unicron_bus::whole_topic::read_topic(&unicron_codec::KafkaConfig::default(), brokers, topic)
        .unwrap_or_default()
        .iter()
        .filter_map(|r| codec.decode(&r.payload).ok())
        .collect()
}

/// Wall-clock ms since the epoch, the time agents stamp their events with.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Polls `f` every 300 ms until it gives a value; fails after `within`.
pub fn wait_for<T>(what: &str, within: std::time::Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// `kill -NAME pid`, which must succeed.
pub fn signal(pid: i32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// `unicron [--config CONFIG] up --no-sim --archive DIR/run` (broker,
/// detector, planner; an executor if CONFIG has one), its output in
/// DIR/up.out and DIR/up.err; with the broker address it wrote.
pub fn up_no_sim(dir: &std::path::Path, config: Option<&std::path::Path>) -> (Running, String) {
    let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
    let run = dir.join("run");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_unicron"));
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let up = Running(
        command
            .args([
                "up",
                "--no-sim",
                "--no-status",
                "--duration",
                "900s",
                "--archive",
            ])
            .arg(&run)
            .current_dir(dir)
            .env("UNICRON_METRICS__ENABLED", "false")
            .stdin(std::process::Stdio::null())
            .stdout(log("up.out"))
            .stderr(log("up.err"))
            .spawn()
            .unwrap(),
    );
    let brokers = wait_for(
        "the run's broker file",
        std::time::Duration::from_secs(60),
        || {
            std::fs::read_to_string(run.join("brokers"))
                .ok()
                .filter(|b| b.ends_with('\n'))
                .map(|b| b.trim().to_string())
        },
    );
    (up, brokers)
}

/// Stops `up` with SIGINT, so its archive (DIR/run) is complete, and
/// replays the archive with the run's configuration: no divergence.
pub fn stop_and_replay(mut up: Running, dir: &std::path::Path, config: Option<&std::path::Path>) {
    signal(up.0.id() as i32, "INT");
    let _ = up.0.wait();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_unicron"));
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let replay = command
        .args(["replay", "--from-archive"])
        .arg(dir.join("run"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&replay.stdout);
    println!("{text}");
    assert!(
        replay.status.success(),
        "replay: {text}{}",
        String::from_utf8_lossy(&replay.stderr)
    );
}

/// Debian's python3-torch with gloo, as the real-PyTorch tests need it.
pub fn need_torch() {
    let torch = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import torch.distributed as d; assert d.is_gloo_available()",
        ])
        .status();
    assert!(
        torch.is_ok_and(|s| s.success()),
        "Debian's python3-torch is needed (.ci/run installs it)"
    );
}

/// A self-signed certificate for 127.0.0.1: (cert, key).
pub fn certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl: {out:?}");
    (cert, key)
}

/// A PEM file with `key` then `cert`, as Kafka reads its keystore.
pub fn keystore(
    dir: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> std::path::PathBuf {
    let keystore = dir.join("keystore.pem");
    let pem = [
        std::fs::read_to_string(key).unwrap(),
        std::fs::read_to_string(cert).unwrap(),
    ]
    .concat();
    std::fs::write(&keystore, pem).unwrap();
    keystore
}
