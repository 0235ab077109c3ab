//! The standalone-broker group: unicron's services as separate processes
//! on tansu 0.6.0 (a Kafka-protocol broker, not the embedded one). Here
//! TLS and SASL; the chaos scenario, with the services killed while they
//! work, is tools/chaos/tests/standalone.rs (docs/chaos.md).
//!
//! `./dev test` installs tansu and sets `TANSU`; under CI a missing tansu
//! fails the test, elsewhere it is skipped with a message. Run the group
//! alone with `cargo test --workspace --test standalone`.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Running, spawn_listening};

/// A tansu process on loopback with SQLite storage in `dir`, advertising
/// `advertised` to clients.
fn start_tansu(
    tansu: &Path,
    dir: &Path,
    addr: SocketAddr,
    advertised: SocketAddr,
    extra: &[&str],
) -> Running {
    let log = std::fs::File::create(dir.join("tansu.log")).unwrap();
    let mut command = Command::new(tansu);
    command
        .args(["broker", "--listener-url", &format!("tcp://{addr}")])
        .args(["--advertised-listener-url", &format!("tcp://{advertised}")])
        .args(["--storage-engine", "sqlite://tansu.db"])
        .args(extra)
        .current_dir(dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    spawn_listening(&mut command, addr, Duration::from_secs(30))
}

/// Runs `command` to its end and asserts it succeeded; its output.
fn run_ok(command: &mut Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}:\n{}\n{}",
        command.get_program(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn sasl_ssl_config(path: &Path, addr: SocketAddr, password: &str, ca: &Path) {
    std::fs::write(
        path,
        format!(
            r#"[kafka]
brokers = "{addr}"
security.protocol = "SASL_SSL"
ssl.ca.location = "{ca}"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "unicron"
sasl.password = "{password}"
[metrics]
enabled = false
[status]
enabled = false
# The loop below runs the simulator at 20x: the default 1 s of lateness
# would be 50 ms of real jitter between partitions, which a broker behind a
# TLS terminator exceeds (heartbeats then look late). 2 s of real jitter:
[detector.tuning]
allowed_lateness_s = 40.0
"#,
            ca = ca.display()
        ),
    )
    .unwrap();
}

/// A TLS terminator (socat) in front of a plaintext port, so clients speak
/// TLS to the broker: tansu 0.6.0 cannot start its own TLS listener (its
/// command line refuses `--cert` with `--key`).
fn start_tls_front(listen: SocketAddr, to: SocketAddr, cert: &Path, key: &Path) -> Running {
    let log = std::fs::File::create(cert.with_file_name("socat.log")).unwrap();
    let mut command = Command::new("socat");
    command
        .arg(format!(
            "OPENSSL-LISTEN:{},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
            listen.port(),
            cert.display(),
            key.display()
        ))
        .arg(format!("TCP:{to}"))
        .stderr(log);
    spawn_listening(&mut command, listen, Duration::from_secs(10))
}

/// A self-signed certificate for 127.0.0.1: (cert, key).
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    run_ok(
        Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=127.0.0.1"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    );
    (cert, key)
}

/// TLS and SASL/SCRAM settings are librdkafka properties passed through
/// `[kafka]`: against a broker that requires SCRAM behind TLS, the whole
/// loop runs with the right CA and password; a wrong password or an
/// unknown CA stops `topics create` with one line.
#[test]
fn tls_and_sasl_settings_pass_through_to_the_broker() {
    let Some(tansu) = unicron_bus::testing::tansu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (plain, tls) = (free_addr(), free_addr());
    let (cert, key) = certificate(dir.path());
    // tansu creates users through its own Kafka API, so the user is made
    // before authentication is switched on, on the same storage.
    {
        let _open = start_tansu(&tansu, dir.path(), plain, plain, &[]);
        run_ok(
            Command::new(&tansu)
                .args(["user", "create", "--broker", &format!("tcp://{plain}")])
                .args(["--mechanism", "scram512", "unicron", "s3cret-pass"]),
        );
    }
    // Clients are sent to the TLS port by the broker's metadata.
    let _broker = start_tansu(&tansu, dir.path(), plain, tls, &["--authentication"]);
    let _front = start_tls_front(tls, plain, &cert, &key);
    let addr = tls;
    let good = dir.path().join("good.toml");
    sasl_ssl_config(&good, addr, "s3cret-pass", &cert);
    let unicron = env!("CARGO_BIN_EXE_unicron");

    let created = run_ok(
        Command::new(unicron)
            .arg("--config")
            .arg(&good)
            .args(["topics", "create"]),
    );
    let stdout = String::from_utf8_lossy(&created.stdout);
    assert!(stdout.contains("unicron.failures"), "{stdout}");

    // The whole loop through the authenticated broker: one failure is
    // detected and acted on.
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, "time_s,node,kind\n200,node-001,nccl_timeout\n").unwrap();
    let summary = dir.path().join("summary.json");
    run_ok(
        Command::new(unicron)
            .arg("--config")
            .arg(&good)
            .args(["up", "--no-archive", "--no-status", "--duration", "40s"])
            .args(["--speed", "20", "--trace"])
            .arg(&trace)
            .arg("--summary-json")
            .arg(&summary),
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["failures_detected"], 1, "{s:#}");
    assert_eq!(s["failures_resolved"], 1, "{s:#}");
    // Which action: a reattempt when the NCCL evidence arrives in time, a
    // restart when a loaded machine (at 20x speed) delays it past the hang
    // deadline. Classification is the detector's tests' concern; here the
    // commands only have to go through the authenticated broker.
    let action = s["faults"][0]["resolved_by"].as_str().unwrap_or_default();
    assert!(["reattempt", "restart"].contains(&action), "{s:#}");

    // tansu closes the connection on a failed SCRAM exchange (Apache Kafka
    // answers with an authentication error instead), and a certificate
    // that does not verify ends the TLS handshake: either way one line
    // names the broker.
    let other_ca = tempfile::tempdir().unwrap();
    let (stranger, _) = certificate(other_ca.path());
    for (name, password, ca) in [
        ("wrong password", "wrong-pass", cert.as_path()),
        ("unknown CA", "s3cret-pass", stranger.as_path()),
    ] {
        let bad = dir.path().join("bad.toml");
        sasl_ssl_config(&bad, addr, password, ca);
        let refused = Command::new(unicron)
            .arg("--config")
            .arg(&bad)
            .args(["topics", "create"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{name} was accepted");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("error: creating topics on {addr}: kafka:")),
            "{name}: {stderr}"
        );
    }
}
