//! The `unicron` binary as an operator runs it: separate processes, real
//! arguments, real exit codes.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

mod common;
use common::http_get;

fn unicron() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_unicron"));
    command.env_remove("RUST_LOG");
    // Port 0: tests never collide on the default metrics port.
    command.env("UNICRON_METRICS__LISTEN", "127.0.0.1:0");
    command.env("UNICRON_STATUS__LISTEN", "127.0.0.1:0");
    // `up` archives by default; never into the source tree.
    command.env(
        "UNICRON_ARCHIVER__DIR",
        std::env::temp_dir().join("unicron-test-archive"),
    );
    command
}

fn run(args: &[&str]) -> Output {
    unicron().args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn version_is_printed() {
    let out = run(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        format!("unicron {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn topics_list_prints_the_topology() {
    let out = run(&["topics", "list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 12, "{stdout}");
    assert!(lines[0].starts_with("topic"));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("unicron.failures ") && l.contains("FailureEvent"))
    );
}

#[test]
fn bad_config_is_one_line_naming_the_field_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u.toml");
    std::fs::write(&path, "[kafka]\nmax_record_bytes = \"lots\"\n").unwrap();
    let out = run(&["--config", path.to_str().unwrap(), "topics", "list"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: config:") && stderr.contains("kafka.max_record_bytes"),
        "{stderr}"
    );
}

#[test]
fn bad_environment_override_names_the_variable_path() {
    let out = unicron()
        .env("UNICRON_EMBEDDED__BROKERS", "many")
        .args(["topics", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("embedded.brokers"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bad_arguments_exit_2() {
    let out = run(&["up", "--duration", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--duration"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(run(&["topics", "delete"]).status.code(), Some(2));
}

#[test]
fn bad_simulation_flags_are_one_line_and_exit_2() {
    let out = run(&["up", "--speed", "0", "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("sim.speed"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, "time_s,node,kind\n10,node-001,gremlins\n").unwrap();
    let out = run(&["up", "--trace", trace.to_str().unwrap(), "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("sim.trace:") && stderr.contains(":2: kind: `gremlins`"),
        "{stderr}"
    );

    // A real trace: a day it does not have, and a file not in its format.
    let real = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tools/traces/infinitehbd/fault_trace.json"
    );
    let out = run(&[
        "up",
        "--trace",
        real,
        "--trace-day",
        "999",
        "--duration",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("sim.trace_day: 999 is past the trace's 349 days"),
        "{stderr}"
    );
    let json = dir.path().join("trace.json");
    std::fs::write(&json, "{\"faults\": []}").unwrap();
    let out = run(&["up", "--trace", json.to_str().unwrap(), "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not an InfiniteHBD trace"), "{stderr}");
}

#[test]
fn evaluate_compares_policies_and_writes_the_docs() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("eval.json");
    let docs = dir.path().join("docs");
    // Without --out it writes nothing, wherever it runs.
    let cwd = tempfile::tempdir().unwrap();
    let printed = unicron()
        .current_dir(cwd.path())
        .args(["evaluate", "--scenario", "smoke", "--seeds", "1"])
        .output()
        .unwrap();
    assert!(printed.status.success(), "{}", text(&printed.stderr));
    assert!(text(&printed.stdout).contains("| unicron |"));
    assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);

    let out = run(&[
        "evaluate",
        "--scenario",
        "smoke",
        "--seeds",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--out",
        docs.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("| unicron |"), "{stdout}");
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let e = &e[0];
    assert_eq!(e["scenario"], "smoke");
    for policy in [
        "unicron",
        "checkpoint-restart",
        "elastic-single-job",
        "oobleck",
        "varuna",
    ] {
        let waf = e["policies"][policy]["waf_fraction"].as_f64().unwrap();
        assert!(waf > 0.0 && waf < 1.0, "{policy}: {waf}");
    }
    // Out of memory at these models in its own authors' artifact.
    assert!(e["policies"]["bamboo"].is_null(), "{e:#}");
    assert!(
        e["not_run"]["bamboo"]
            .as_str()
            .unwrap()
            .contains("out of memory")
    );
    let doc = std::fs::read_to_string(docs.join("EVALUATION.md")).unwrap();
    assert!(doc.contains("<!-- evaluate:smoke:begin -->") && doc.contains("| unicron |"));
    let svg = std::fs::read_to_string(docs.join("evaluation/smoke.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    // Running again replaces the section instead of adding another.
    let again = run(&[
        "evaluate",
        "--scenario",
        "smoke",
        "--seeds",
        "1",
        "--out",
        docs.to_str().unwrap(),
    ]);
    assert!(again.status.success());
    let doc = std::fs::read_to_string(docs.join("EVALUATION.md")).unwrap();
    assert_eq!(doc.matches("<!-- evaluate:smoke:begin -->").count(), 1);

    let bad = run(&["evaluate", "--scenario", "mars"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("--scenario: `mars`"));
}

#[test]
fn topics_create_needs_brokers() {
    let out = run(&["topics", "create"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        "error: --brokers: required (or set kafka.brokers in the configuration)"
    );
}

/// A standalone executor has no built-in cluster or backend: configured
/// with only its keys, it stops with one line naming what is missing.
#[test]
fn executor_needs_its_cluster_and_backend() {
    let public = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    let executor = |extra: &[(&str, &str)]| {
        let mut command = unicron();
        command
            .env("UNICRON_KAFKA__BROKERS", "127.0.0.1:9")
            .env("UNICRON_EXECUTOR__PUBLIC_KEYS__DEV", public);
        for (k, v) in extra {
            command.env(k, v);
        }
        command.arg("executor").output().unwrap()
    };
    let out = executor(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        "error: config: executor.cluster: required (the cluster this executor acts for)"
    );
    let out = executor(&[("UNICRON_EXECUTOR__CLUSTER", "a")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: config: executor.backend: required"),
        "{stderr}"
    );
}

/// `unicron up --no-sim` prints the broker first; another process can then
/// use it, and `topics create` against it is idempotent (everything exists).
#[test]
fn up_hosts_a_broker_other_processes_can_use() {
    let mut child = unicron()
        .args(["up", "--no-sim", "--duration", "20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let broker = first
        .strip_prefix("broker: ")
        .unwrap_or_else(|| panic!("first line is `{first}`"))
        .to_string();
    assert_eq!(
        lines.next().unwrap().unwrap(),
        "topics: 11 (11 created, 0 existed)"
    );
    let planner = lines.next().unwrap().unwrap();
    assert!(
        planner.starts_with(
            "planner: policy unicron, isolations at most 2% of the nodes an hour per cluster, signing key "
        ),
        "{planner}"
    );
    assert!(
        planner.ends_with("(development key generated for this run)"),
        "{planner}"
    );
    let detector = lines.next().unwrap().unwrap();
    assert!(
        detector.starts_with("detector: ") && detector.contains("otlp_logs (otlp_proto)"),
        "{detector}"
    );
    let executor = lines.next().unwrap().unwrap();
    assert!(
        executor.starts_with("executor: not started (no simulator"),
        "{executor}"
    );
    let agents = lines.next().unwrap().unwrap();
    assert!(
        agents.starts_with(&format!(
            "agents: unicron agent --brokers {broker} --planner-key "
        )),
        "{agents}"
    );
    let archive = lines.next().unwrap().unwrap();
    assert!(
        archive.starts_with("archive: ") && archive.contains("unicron-test-archive/run-"),
        "{archive}"
    );
    let metrics = lines.next().unwrap().unwrap();
    assert!(
        metrics.starts_with("metrics: http://127.0.0.1:"),
        "{metrics}"
    );
    let status = lines.next().unwrap().unwrap();
    assert!(status.starts_with("status: http://127.0.0.1:"), "{status}");
    // Ready once every service's loop runs (a bounded wait, not a timing check).
    let address = metrics
        .trim_start_matches("metrics: http://")
        .trim_end_matches("/metrics");
    let ready = (0..100).find_map(|_| {
        let reply = http_get(address, "/readyz");
        if reply.starts_with("HTTP/1.1 200") {
            return Some(reply);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        None
    });
    let ready = ready.expect("/readyz never answered 200");
    assert!(ready.ends_with("ready\n"), "{ready}");
    assert!(http_get(address, "/healthz").starts_with("HTTP/1.1 200"));
    let exported = http_get(address, "/metrics");
    assert!(
        exported.contains("unicron_service_ready{service=\"planner\"} 1"),
        "{exported}"
    );

    let out = run(&["topics", "create", "--brokers", &broker]);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 11, "{stdout}");
    assert!(stdout.lines().all(|l| l.starts_with("exists ")), "{stdout}");
    assert!(
        stdout.contains("unicron.telemetry (12 partitions, 1 replicas)"),
        "{stdout}"
    );
}

#[test]
fn sigterm_stops_the_services_cleanly() {
    let mut child = unicron()
        .args(["up", "--no-sim", "--no-archive"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    let seen: Vec<String> = lines
        .by_ref()
        .take_while(|l| !l.starts_with("running;"))
        .collect();
    assert!(seen.iter().any(|l| l.starts_with("status: ")), "{seen:?}");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Read to the end: `up` prints after the signal and must find stdout open.
    lines.for_each(drop);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        text(&out.stderr)
    );
}

#[test]
fn keys_are_generated_once_and_their_public_key_printed() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("planner.key");
    let key_arg = key.to_str().unwrap();
    let made = run(&["keys", "generate", "--out", key_arg]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let printed = text(&made.stdout);
    let public = printed.trim().strip_prefix("public key: ").unwrap();
    assert_eq!(public.len(), 64, "{printed}");
    let seed = std::fs::read_to_string(&key).unwrap();
    assert_eq!(seed.trim().len(), 64);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // The same key file gives the same public key; a key is never overwritten.
    assert_eq!(
        text(&run(&["keys", "public", "--key", key_arg]).stdout),
        printed
    );
    let again = run(&["keys", "generate", "--out", key_arg]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("--out"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(std::fs::read_to_string(&key).unwrap(), seed);
    // A file that is not a key is named in one line.
    std::fs::write(&key, "not hex").unwrap();
    let bad = run(&["keys", "public", "--key", key_arg]);
    assert_eq!(bad.status.code(), Some(2));
    let message = text(&bad.stderr);
    assert!(
        message.contains("--key") && message.contains("64 hex"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");
}

/// Runs the whole loop for `duration` of real time and returns the summary.
fn up_summary(extra: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.json");
    let mut command = unicron();
    command.args(["up", "--summary-json", summary.to_str().unwrap()]);
    command.args(extra);
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("broker: 127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("WAF achieved:"), "{stdout}");
    serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap()
}

/// A trace of one failure of each severity (an NCCL timeout, a CUDA
/// error, an ECC error), written into `dir`.
fn three_severities_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let trace = dir.join("trace.csv");
    std::fs::write(
        &trace,
        "time_s,node,kind\n200,node-001,nccl_timeout\n400,node-008,cuda_error\n600,node-014,ecc_error\n",
    )
    .unwrap();
    trace
}

/// With clusters' own topics (`kafka.cluster_topics`) the simulated
/// cluster and the executor write the cluster's own topic, `up` runs the
/// ingress, and the same three failures are detected and acted on within
/// the same bounds: the extra hop costs no detection and no late action.
#[test]
fn up_with_clusters_own_topics_heals_through_the_ingress() {
    let dir = tempfile::tempdir().unwrap();
    let trace = three_severities_trace(dir.path());
    let s = up_summary(
        &[
            "--duration",
            "40s",
            "--speed",
            "20",
            "--no-archive",
            "--trace",
            trace.to_str().unwrap(),
        ],
        &[("UNICRON_KAFKA__CLUSTER_TOPICS", "true")],
    );
    assert_eq!(s["failures_detected"], 3, "{s:#}");
    for fault in s["faults"].as_array().unwrap() {
        assert_eq!(fault["detected_as"], fault["kind"], "{fault:#}");
        let injected = fault["injected_ms"].as_i64().unwrap();
        let detected = fault["detected_ms"].as_i64().unwrap() - injected;
        let acted = fault["resolved_ms"].as_i64().unwrap_or(i64::MAX) - injected;
        assert!(
            detected <= 30_000,
            "detected after {detected} ms: {fault:#}"
        );
        assert!(acted <= 60_000, "acted on after {acted} ms: {fault:#}");
    }
    assert_eq!(s["false_detections"], 0, "{s:#}");
    assert_eq!(s["failed_actions"], 0, "{s:#}");
}

/// One failure of each severity, from a trace, across the processes of a
/// real run: each is detected as its kind and answered by an action of its
/// recovery path, once, within bounded simulated time, and the archive
/// replays. Which action exactly (SEV3 reattempt, SEV2 restart, SEV1
/// isolate) is the planner's deterministic choice, asserted without wall
/// time in the simulator's offline loop
/// (`each_severity_gets_its_action_once_and_in_bounded_time`): here the
/// simulated cluster runs in real time, and on a loaded machine a job may
/// miss its reattempt's window and be restarted, which is the escalation
/// working, not a fault.
#[test]
fn up_answers_each_severity_with_its_action_once() {
    let dir = tempfile::tempdir().unwrap();
    let trace = three_severities_trace(dir.path());
    let archive = dir.path().join("archive");
    let s = up_summary(
        &[
            "--duration",
            "40s",
            "--speed",
            "20",
            "--trace",
            trace.to_str().unwrap(),
            "--archive",
            archive.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(s["failures_injected"], 3, "{s:#}");
    assert_eq!(s["failures_detected"], 3, "{s:#}");
    let want: [(&str, &[&str]); 3] = [
        ("nccl_timeout", &["reattempt", "restart"]),
        ("cuda_error", &["restart"]),
        ("ecc_error", &["isolate_node"]),
    ];
    for (fault, (kind, path)) in s["faults"].as_array().unwrap().iter().zip(want) {
        assert_eq!(fault["kind"], kind, "{fault:#}");
        assert_eq!(fault["detected_as"], kind, "{fault:#}");
        let action = fault["resolved_by"].as_str().unwrap_or("none");
        assert!(
            path.contains(&action),
            "{kind} resolved by {action}: {fault:#}"
        );
        let injected = fault["injected_ms"].as_i64().unwrap();
        let detected = fault["detected_ms"].as_i64().unwrap() - injected;
        let acted = fault["resolved_ms"].as_i64().unwrap() - injected;
        assert!(detected <= 30_000, "{kind} detected after {detected} ms");
        assert!(acted <= 60_000, "{kind} acted on after {acted} ms");
    }
    // Once each: no second reattempt/restart/isolation, nothing failed,
    // nothing executed twice, no false alarm.
    let actions = &s["actions_by_kind"];
    let count = |action: &str| actions[action].as_u64().unwrap_or(0);
    assert!(count("reattempt") <= 1, "{s:#}");
    assert_eq!(
        count("restart"),
        2 - count("reattempt"),
        "the CUDA error's restart, and the NCCL timeout's unless reattempted: {s:#}"
    );
    assert_eq!(count("isolate_node"), 1, "{s:#}");
    assert_eq!(s["failed_actions"], 0, "{s:#}");
    assert_eq!(s["duplicate_requests"], 0, "{s:#}");
    assert_eq!(s["false_detections"], 0, "{s:#}");
    let waf = s["waf_fraction"].as_f64().unwrap();
    assert!(waf > 0.3 && waf < 1.0, "{waf}");

    // The archive of the run replays with no divergence ...
    let report = dir.path().join("replay.json");
    let out = run(&[
        "replay",
        "--from-archive",
        archive.to_str().unwrap(),
        "--json",
        report.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(r["decisions_compared"].as_u64().unwrap() >= 6, "{r:#}");
    assert_eq!(r["diverged"], 0, "{r:#}");
    assert_eq!(r["failures"]["compared"], 3, "{r:#}");

    // What another policy would have done with the same history.
    let what_if = dir.path().join("what-if.json");
    let out = run(&[
        "replay",
        "--from-archive",
        archive.to_str().unwrap(),
        "--policy",
        "checkpoint-restart",
        "--json",
        what_if.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let w: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&what_if).unwrap()).unwrap();
    assert_eq!(w["what_if"]["policy"], "checkpoint-restart", "{w:#}");
    let changed = &w["what_if"]["commands"];
    assert!(
        changed["added"].as_u64().unwrap() + changed["removed"].as_u64().unwrap() > 0,
        "{w:#}"
    );
    assert!(
        w["what_if"]["waf_recorded"].as_f64().unwrap() > 0.0,
        "{w:#}"
    );

    // A command altered in the archive is a divergence, shown both ways.
    let altered = dir.path().join("altered");
    let id = tamper_with_a_command(&archive, &altered);
    let out = run(&["replay", "--from-archive", altered.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("first divergence: command {id}")),
        "{stdout}"
    );
    assert!(stdout.contains("node-999"), "{stdout}");
    assert!(
        text(&out.stderr).contains("1 divergence"),
        "{}",
        text(&out.stderr)
    );

    // ... and explains the isolation of the ECC node link by link.
    let list = run(&[
        "explain",
        "--list",
        "--from-archive",
        archive.to_str().unwrap(),
    ]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    let listed = text(&list.stdout);
    let id = listed
        .lines()
        .find(|l| l.contains(" isolate_node "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("no isolation in {listed}"));
    let out = run(&[
        "explain",
        id,
        "--from-archive",
        archive.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let chain: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let source = &chain["sources"][0];
    assert!(
        source["record"]["line"].as_str().unwrap().contains("Xid"),
        "{chain:#}"
    );
    assert_eq!(chain["failure"]["kind"], "ecc_error", "{chain:#}");
    assert!(
        chain["failure"]["evidence"][0]["offset"] == source["offset"],
        "{chain:#}"
    );
    assert_eq!(chain["decision"]["id"], chain["command"]["decision_id"]);
    assert!(
        !chain["decision"]["alternatives"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{chain:#}"
    );
    assert_eq!(chain["command"]["nodes"][0], "node-014");
    let statuses: Vec<&str> = chain["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["accepted", "succeeded"], "{chain:#}");
}

/// Copies the archive, with the nodes of the first command that has any
/// replaced; returns that command's id.
fn tamper_with_a_command(from: &std::path::Path, to: &std::path::Path) -> String {
    use unicron_codec::archive::{self, ArchiveWriter, WriterOptions};
    use unicron_codec::schemas::{AvroRecord, RecordType};
    use unicron_core::*;

    fn copy<T: AvroRecord>(
        file: &archive::ArchiveFile,
        record_type: RecordType,
        writer: &mut ArchiveWriter,
        alter: &mut dyn FnMut(&mut T) -> bool,
    ) {
        let codec = unicron_codec::AvroCodec::<T>::default();
        for mut a in archive::read::<T>(&file.path, record_type).unwrap() {
            alter(&mut a.record);
            let raw = unicron_codec::InboundRecord {
                topic: a.topic,
                partition: a.partition,
                offset: a.offset,
                key: a.key,
                payload: codec.encode(&a.record).unwrap(),
                timestamp_ms: a.timestamp_ms,
                caught_up: true,
            };
            writer.append(&raw, record_type).unwrap();
        }
    }

    let topology = unicron_codec::Topology::builtin();
    let mut writer = ArchiveWriter::open(to, WriterOptions::default()).unwrap();
    let mut changed: Option<String> = None;
    for file in archive::list(from).unwrap() {
        let name = file.topic.trim_start_matches("unicron.");
        let spec = topology.topics.iter().find(|t| t.name == name).unwrap();
        let rt = RecordType::from_name(&spec.record).unwrap();
        let w = &mut writer;
        match rt {
            RecordType::TelemetryBatch => copy::<TelemetryBatch>(&file, rt, w, &mut |_| false),
            RecordType::LogRecord => copy::<LogRecord>(&file, rt, w, &mut |_| false),
            RecordType::AgentEvent => copy::<AgentEvent>(&file, rt, w, &mut |_| false),
            RecordType::FailureEvent => copy::<FailureEvent>(&file, rt, w, &mut |_| false),
            RecordType::ClusterEvent => copy::<ClusterEvent>(&file, rt, w, &mut |_| false),
            RecordType::Decision => copy::<Decision>(&file, rt, w, &mut |_| false),
            RecordType::CommandResult => copy::<CommandResult>(&file, rt, w, &mut |_| false),
            RecordType::DeadLetter => copy::<DeadLetter>(&file, rt, w, &mut |_| false),
            RecordType::PlannerCheckpoint => {
                copy::<PlannerCheckpoint>(&file, rt, w, &mut |_| false)
            }
            RecordType::DetectorRound => {
                copy::<unicron_core::DetectorRound>(&file, rt, w, &mut |_| false)
            }
            RecordType::Command => copy::<Command>(&file, rt, w, &mut |c: &mut Command| {
                if changed.is_none() && !c.nodes.is_empty() {
                    c.nodes = vec!["node-999".into()];
                    changed = Some(c.id.clone());
                    return true;
                }
                false
            }),
        }
    }
    writer.close_all().unwrap();
    changed.expect("a command with nodes")
}

/// Same seed, same summary: the loop's outcome depends on event time only.
#[test]
fn up_with_a_fixed_seed_gives_the_same_summary_twice() {
    // 20x leaves the services half a second of real time per action
    // before it counts as late (dispatch_s / speed): ample on a busy machine.
    let args = ["--duration", "30s", "--speed", "20", "--seed", "11"];
    let env = [("UNICRON_SIM__MTBF_S", "200")];
    let first = up_summary(&args, &env);
    let second = up_summary(&args, &env);
    assert!(
        first["failures_injected"].as_u64().unwrap() >= 2,
        "{first:#}"
    );
    assert_eq!(first, second);
}

#[test]
fn plan_solves_the_documented_example() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    std::fs::write(
        &path,
        r#"{"gpus": 128, "unit": 8, "d_running_s": 86400,
            "jobs": [{"id": "gpt-13b", "weight": 1.0, "min_gpus": 16, "max_gpus": 128, "current_gpus": 64,
                      "hit": false, "d_transition_s": 600,
                      "throughput": [[16, 2.1e15], [32, 4.0e15], [64, 7.6e15], [128, 14.1e15]]},
                     {"id": "gpt-1b", "weight": 2.0, "min_gpus": 8, "max_gpus": 32, "current_gpus": 32,
                      "d_transition_s": 300, "throughput": [[8, 0.5e15], [32, 1.9e15]]}]}"#,
    )
    .unwrap();
    let out = run(&["plan", "--input", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(r#"{"allocation":{"gpt-13b":96,"gpt-1b":32},"waf":"#),
        "{stdout}"
    );
    assert!(stdout.contains(r#""objective":"#));
}

#[test]
fn plan_rejects_bad_input_with_the_field_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    for (body, field) in [
        (
            r#"{"gpus": -8, "unit": 8, "d_running_s": 1, "jobs": []}"#,
            "gpus",
        ),
        (
            r#"{"gpus": 8, "unit": 8, "d_running_s": 1, "jobs": [{"id": "a", "min_gpus": 8, "max_gpus": 8, "d_transition_s": 1, "throughput": [[16, 1.0], [8, 2.0]]}]}"#,
            "jobs[0].throughput[1]",
        ),
        (
            r#"{"gpus": 8, "unit": 8, "d_running_s": 1, "jobs": [], "extra": true}"#,
            "extra",
        ),
    ] {
        std::fs::write(&path, body).unwrap();
        let out = run(&["plan", "--input", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{body}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(&format!("error: {field}")), "{stderr}");
    }
    let out = run(&["plan", "--input", "/nonexistent.json"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `unicron classify` reads stdin and prints one JSON verdict per line; a
/// bad rules file is a one-line error naming the rule, exit 2.
#[test]
fn classify_prints_one_verdict_per_line_and_rejects_bad_rules() {
    use std::io::Write;
    let mut child = unicron()
        .arg("classify")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"iteration 10 | loss 2.3\nConnectionResetError: [Errno 104] Connection reset by peer\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "{\"kind\":\"none\",\"severity\":null,\"rule\":null}\n{\"kind\":\"connection_reset\",\"severity\":\"SEV3\",\"rule\":\"socket.connection_reset\"}\n"
    );

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"mine\"\nkind = \"cuda_error\"\nkeywords = [\"x\"]\npattern = '(x'\n",
    )
    .unwrap();
    let out = run(&["classify", "--rules", rules.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("rule `mine`: field `pattern`"), "{err}");
}

/// A site whose only input is the OpenTelemetry Collector's `otlp_logs`
/// (which `up` creates on its embedded broker): the failure it carries is
/// detected, and
/// `replay --from-kafka` re-derives it from that topic.
#[test]
fn replay_re_derives_failures_from_an_otlp_only_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::Running(
        unicron()
            .args(["up", "--no-sim", "--duration", "120s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let broker = first.strip_prefix("broker: ").unwrap().to_string();
    // The OpenTelemetry SDK's own encoder makes the record; kcat sends a
    // file as one record.
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../detector/tests/producers/otlp_payload.py"
    );
    let payload = Command::new("python3")
        .args([script, "logs", "proto", "otlp-host"])
        .output()
        .expect("python3 with the OpenTelemetry SDK (./dev test installs it)");
    assert!(payload.status.success(), "{}", text(&payload.stderr));
    let file = dir.path().join("request.pb");
    std::fs::write(&file, &payload.stdout).unwrap();
    let sent = Command::new("kcat")
        .env_remove("LD_LIBRARY_PATH") // Debian's librdkafka, not the build's
        .args([
            "-P",
            "-b",
            &broker,
            "-t",
            "otlp_logs",
            file.to_str().unwrap(),
        ])
        .status()
        .expect("kcat (./dev test installs it)");
    assert!(sent.success());

    // Replay until the live failure is in the history and re-derived (a
    // bounded wait: the detector finds the new topic within seconds).
    let report = dir.path().join("replay.json");
    let mut last = serde_json::Value::Null;
    for _ in 0..60 {
        let out = run(&[
            "replay",
            "--from-kafka",
            "--brokers",
            &broker,
            "--json",
            report.to_str().unwrap(),
        ]);
        if let Ok(text) = std::fs::read_to_string(&report) {
            last = serde_json::from_str(&text).unwrap();
            if last["failures"]["identical"].as_u64().unwrap_or(0) >= 1 {
                assert!(out.status.success(), "{last:#}");
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert_eq!(last["failures"]["compared"], 1, "{last:#}");
    assert_eq!(last["failures"]["identical"], 1, "{last:#}");
    assert_eq!(last["diverged"], 0, "{last:#}");
}

/// `unicron remote-write`: a bad or taken `--listen` is one line naming
/// the flag, exit 2, before anything is served.
#[test]
fn remote_write_rejects_a_bad_listen_address_in_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    for (listen, says) in [
        (
            "nonsense",
            "error: --listen `nonsense`: not an address HOST:PORT",
        ),
        ("127.0.0.1:99999", "error: --listen `127.0.0.1:99999`: "),
        (taken.as_str(), "error: --listen: cannot listen on "),
    ] {
        let out = unicron()
            .env("UNICRON_KAFKA__BROKERS", "127.0.0.1:9")
            .args(["remote-write", "--listen", listen])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{listen}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(says), "{stderr}");
    }
}
