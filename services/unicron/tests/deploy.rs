//! The deployment files under `deploy/` and `docs/metrics.md`, checked against
//! the code and the real `unicron` binary, without Kubernetes, Docker or
//! systemd: every file parses, every configuration they ship loads with the
//! environment they set, ports, paths, commands and probe paths agree with
//! what the binary does, and every metric they name is one the code exports.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;

use serde_json::Value as Json;
use unicron_bus::metrics::{Metric, MetricKind};
// yaml_serde is serde_yaml continued by the YAML organization (same API,
// maintained, rust-version 1.82); serde_yaml itself is archived.
use yaml_serde::Value as Yaml;

const BIN: &str = env!("CARGO_BIN_EXE_unicron");

/// Public key of RFC 8032's first test vector: stands in for the public keys
/// that deployments leave to the operator (Secret and env file placeholders).
const STAND_IN_PUBLIC_KEY: &str =
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

/// What marks a value the operator must fill in.
const PLACEHOLDER: &str = "REPLACE_WITH";

/// The quantiles metrics-exporter-prometheus 0.18 renders for a summary.
const SUMMARY_QUANTILES: [&str; 7] = ["0", "0.5", "0.9", "0.95", "0.99", "0.999", "1"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document of a YAML file, with `<<` merge keys applied.
fn yaml_docs(relative: &str) -> Vec<Yaml> {
    let text = read(relative);
    let mut docs = Vec::new();
    for document in yaml_serde::Deserializer::from_str(&text) {
        let mut value: Yaml = serde::Deserialize::deserialize(document)
            .unwrap_or_else(|e| panic!("{relative}: not valid YAML: {e}"));
        value
            .apply_merge()
            .unwrap_or_else(|e| panic!("{relative}: bad merge key: {e}"));
        if !value.is_null() {
            docs.push(value);
        }
    }
    docs
}

fn files_under(relative: &str, extensions: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![repo().join(relative)];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "target" {
                    stack.push(path);
                }
            } else if extensions.iter().any(|ext| name.ends_with(ext)) {
                let rel = path.strip_prefix(repo()).unwrap();
                out.push(rel.to_string_lossy().to_string());
            }
        }
    }
    out.sort();
    out
}

fn text(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn seq(value: &Yaml) -> &[Yaml] {
    value.as_sequence().map(|s| s.as_slice()).unwrap_or(&[])
}

// ---------------------------------------------------------------------------
// The binary

fn unicron(args: &[&str], env: &BTreeMap<String, String>) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .envs(env)
        .output()
        .expect("run unicron")
}

/// Loads `config_text` with `env` the way a service starts: `unicron
/// --config FILE topics list` reads the file and the environment and
/// validates everything, without connecting anywhere.
fn load_config(config_text: &str, env: &BTreeMap<String, String>) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unicron.toml");
    std::fs::write(&path, config_text).unwrap();
    unicron(&["--config", path.to_str().unwrap(), "topics", "list"], env)
}

fn assert_loads(what: &str, config_text: &str, env: &BTreeMap<String, String>) {
    let out = load_config(config_text, env);
    assert!(
        out.status.success(),
        "{what}: `unicron --config FILE topics list` refused its configuration (env {:?}): {}",
        env.keys().collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A value of the configuration as a service sees it: environment, then the
/// file, then the default (deploy/config/unicron.toml equals the defaults).
fn effective(config_text: &str, env: &BTreeMap<String, String>, key: &str) -> Option<String> {
    let var = format!("UNICRON_{}", key.replace('.', "__").to_ascii_uppercase());
    if let Some(value) = env.get(&var) {
        return Some(value.clone());
    }
    let lookup = |text: &str| {
        let table: toml::Table = text.parse().expect("TOML");
        let mut value = toml::Value::Table(table);
        for part in key.split('.') {
            value = value.get(part)?.clone();
        }
        Some(match value {
            toml::Value::String(s) => s,
            other => other.to_string(),
        })
    };
    lookup(config_text).or_else(|| lookup(&read("deploy/config/unicron.toml")))
}

fn port_of(listen: &str) -> u16 {
    listen
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("`{listen}` is not HOST:PORT"))
}

/// The subcommand path of an argument list (after the program), skipping
/// the global `--config FILE`.
fn subcommand(args: &[String]) -> Vec<String> {
    let mut path = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--config" {
            i += 2;
            continue;
        }
        if args[i].starts_with('-') {
            break;
        }
        path.push(args[i].clone());
        i += 1;
    }
    path
}

fn config_flag(args: &[String]) -> Option<String> {
    let at = args.iter().position(|a| a == "--config")?;
    args.get(at + 1).cloned()
}

// ---------------------------------------------------------------------------
// Metrics in the code

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Counter,
    Gauge,
    /// `histogram!`: rendered as a summary (see `durations_are_queried_as_summaries`).
    Summary,
}

impl From<MetricKind> for Kind {
    fn from(kind: MetricKind) -> Kind {
        match kind {
            MetricKind::Counter => Kind::Counter,
            MetricKind::Gauge => Kind::Gauge,
            MetricKind::Histogram => Kind::Summary,
        }
    }
}

/// Every crate's registry: the metrics it declares and records.
const REGISTRIES: [(&str, &[Metric]); 11] = [
    ("unicron-bus", unicron_bus::metrics::METRICS),
    ("unicron-commands", unicron_commands::METRICS),
    ("unicron-detector", unicron_detector::METRICS),
    ("unicron-ingress", unicron_ingress::METRICS),
    ("unicron-planner", unicron_planner::METRICS),
    ("unicron-executor", unicron_executor::METRICS),
    ("unicron-agent", unicron_agent::METRICS),
    ("unicron-slurm", unicron_slurm::METRICS),
    ("unicron-kubernetes", unicron_kubernetes::METRICS),
    ("unicron-archiver", unicron_archiver::METRICS),
    ("unicron-remote-write", unicron_remote_write::METRICS),
];

/// Every metric the services export, with its kind, from the registries.
fn registry() -> BTreeMap<String, Kind> {
    let mut metrics = BTreeMap::new();
    for (krate, registry) in REGISTRIES {
        for metric in registry {
            let seen = metrics.insert(metric.name.to_string(), Kind::from(metric.kind));
            assert!(seen.is_none(), "{krate}: {} is declared twice", metric.name);
        }
    }
    metrics
}

/// The non-test Rust source of the services and tools, by path.
fn sources() -> Vec<(String, String)> {
    let mut sources = Vec::new();
    for root in ["crates", "services", "tools"] {
        for file in files_under(root, &[".rs"]) {
            // Test code may name metrics it only reads.
            if file.contains("/tests/") || file.contains("/benches/") {
                continue;
            }
            let text = read(&file);
            sources.push((file, text));
        }
    }
    sources
}

/// The first string literal at the start of `text` (after whitespace), if any.
fn leading_literal(text: &str) -> Option<&str> {
    text.trim_start().strip_prefix('"')?.split('"').next()
}

/// A scan of the source that keeps the registry complete: every metric
/// declared (`Metric::counter("...")`, ...) is in a registry with its kind,
/// every `unicron_*` `&str` const is registered, and every
/// `counter!`/`gauge!`/`histogram!` call names its metric through a
/// declared const's `name` of the same kind, never a literal.
#[test]
fn every_metric_in_the_source_is_in_the_registry() {
    let metrics = registry();
    let sources = sources();
    let mut problems = Vec::new();
    // Declared consts: ident -> kinds (two crates may use one ident).
    let mut declared: BTreeMap<String, BTreeSet<Kind>> = BTreeMap::new();
    for (file, text) in &sources {
        for (ctor, kind) in [
            ("Metric::counter(", Kind::Counter),
            ("Metric::gauge(", Kind::Gauge),
            ("Metric::histogram(", Kind::Summary),
        ] {
            for (at, _) in text.match_indices(ctor) {
                let Some(name) = leading_literal(&text[at + ctor.len()..]) else {
                    problems.push(format!("{file}: {ctor}...) without a literal name"));
                    continue;
                };
                match metrics.get(name) {
                    Some(seen) if *seen == kind => {}
                    Some(seen) => problems.push(format!(
                        "{file}: {name} is declared as {kind:?} but registered as {seen:?}"
                    )),
                    None => problems.push(format!("{file}: {name} is in no crate's METRICS")),
                }
                // `pub const IDENT: Metric =` before the constructor.
                let head = text[..at].trim_end().trim_end_matches('=').trim_end();
                if let Some(decl) = head.strip_suffix(": Metric")
                    && let Some(ident) = decl.rsplit(char::is_whitespace).next()
                {
                    declared.entry(ident.to_string()).or_default().insert(kind);
                }
            }
        }
        for line in text.lines() {
            let Some(rest) = line.trim().split("const ").nth(1) else {
                continue;
            };
            let Some((ident, value)) = rest.split_once(": &str = \"") else {
                continue;
            };
            let name = value.split('"').next().unwrap();
            if name.starts_with("unicron_") && !metrics.contains_key(name) {
                problems.push(format!(
                    "{file}: const {} = {name:?} is in no crate's METRICS",
                    ident.trim()
                ));
            }
        }
    }
    for (file, text) in &sources {
        for (mac, kind) in [
            ("counter!(", Kind::Counter),
            ("gauge!(", Kind::Gauge),
            ("histogram!(", Kind::Summary),
        ] {
            for (at, _) in text.match_indices(mac) {
                let arg = text[at + mac.len()..].trim_start();
                if let Some(name) = leading_literal(arg) {
                    problems.push(format!(
                        "{file}: {mac}\"{name}\", ...): record through a registry const's name"
                    ));
                    continue;
                }
                let path: String = arg
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let ident = path.rsplit("::").next().unwrap();
                if !arg[path.len()..].starts_with(".name") {
                    problems.push(format!(
                        "{file}: {mac}{path}...) is not a registry const's name"
                    ));
                } else if ident == "self" {
                    // `Metric::describe`.
                } else if !declared
                    .get(ident)
                    .is_some_and(|kinds| kinds.contains(&kind))
                {
                    problems.push(format!(
                        "{file}: {mac}{ident}.name) is not a declared {kind:?} const"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every `unicron_*` metric-like token in `text` (not a Rust path).
fn metric_refs(text: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for (at, _) in text.match_indices("unicron_") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if text[at + name.len()..].starts_with("::") {
            continue;
        }
        refs.insert(name);
    }
    refs
}

/// Why `name` is not a series the exporter renders, if it is not.
fn unknown_series(name: &str, metrics: &BTreeMap<String, Kind>) -> Option<String> {
    if metrics.contains_key(name) {
        return None;
    }
    for suffix in ["_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && let Some(kind) = metrics.get(base)
        {
            return match kind {
                Kind::Summary => None,
                _ => Some(format!("{base} is a {kind:?}: it has no {suffix} series")),
            };
        }
    }
    if let Some(base) = name.strip_suffix("_bucket")
        && metrics.contains_key(base)
    {
        return Some(format!(
            "{base} is rendered as a summary: it has no _bucket series (use {{quantile=\"...\"}})"
        ));
    }
    Some(format!("{name} is exported by no service"))
}

const METRIC_REFERENCES: [&str; 3] = [
    "deploy/grafana/unicron.json",
    "deploy/prometheus/alerts.yml",
    "docs/metrics.md",
];

#[test]
fn the_registry_holds_every_crates_metrics() {
    let metrics = registry();
    // One name of each kind, from the bus and from service crates.
    assert_eq!(
        metrics.get("unicron_records_in_total"),
        Some(&Kind::Counter),
        "{metrics:?}"
    );
    assert_eq!(
        metrics.get("unicron_planner_waf"),
        Some(&Kind::Gauge),
        "{metrics:?}"
    );
    assert_eq!(
        metrics.get("unicron_planner_decision_seconds"),
        Some(&Kind::Summary),
        "{metrics:?}"
    );
    assert_eq!(
        metrics.get("unicron_archiver_files_total"),
        Some(&Kind::Counter),
        "{metrics:?}"
    );
    for (krate, registry) in REGISTRIES {
        assert!(!registry.is_empty(), "{krate} declares no metric");
    }
}

#[test]
fn dashboards_rules_and_docs_name_only_exported_metrics() {
    let metrics = registry();
    let mut problems = Vec::new();
    for file in METRIC_REFERENCES {
        let refs = metric_refs(&read(file));
        assert!(!refs.is_empty(), "{file} names no unicron metric");
        for name in refs {
            if let Some(why) = unknown_series(&name, &metrics) {
                problems.push(format!("{file}: {why}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "metric names that no service exports (code has {:?}):\n{}",
        metrics.keys().collect::<Vec<_>>(),
        problems.join("\n")
    );
}

#[test]
fn every_exported_metric_is_documented() {
    let docs = read("docs/metrics.md");
    let undocumented: Vec<_> = registry()
        .into_keys()
        .filter(|name| !docs.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "metrics exported by the code but without a row in docs/metrics.md: {undocumented:?}"
    );
}

#[test]
fn durations_are_queried_as_summaries() {
    // The exporter renders histograms as summaries only while no buckets are set.
    let exporter = read("crates/bus/src/metrics.rs");
    for configures_buckets in ["set_buckets", "set_buckets_for_metric"] {
        assert!(
            !exporter.contains(configures_buckets),
            "crates/bus/src/metrics.rs sets histogram buckets: durations now have _bucket \
             series; update docs/metrics.md, the dashboard, the rules and this test"
        );
    }
    let metrics = registry();
    for file in METRIC_REFERENCES {
        let text = read(file);
        assert!(
            // A call, not a mention of the function's name.
            !text
                .match_indices("histogram_quantile(")
                .any(|(at, m)| !text[at + m.len()..].starts_with(')')),
            "{file}: histogram_quantile() finds nothing on a summary; select {{quantile=\"...\"}}"
        );
        // Every quantile selected exists in the rendered summary.
        for (at, _) in text.match_indices("quantile=") {
            let rest = text[at + "quantile=".len()..].trim_start_matches('~');
            let rest = rest.trim_start_matches('\\').trim_start_matches('"');
            let value: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '|')
                .collect();
            for quantile in value.split('|') {
                assert!(
                    SUMMARY_QUANTILES.contains(&quantile),
                    "{file}: quantile \"{quantile}\" is not rendered (only {SUMMARY_QUANTILES:?})"
                );
            }
        }
        // A quantile selector only on summaries.
        for name in metric_refs(&text) {
            if text.contains(&format!("{name}{{quantile")) {
                assert_eq!(
                    metrics.get(&name),
                    Some(&Kind::Summary),
                    "{file}: {name} has no quantile label"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Files parse and are well formed

#[test]
fn every_yaml_and_json_file_parses() {
    let yaml = files_under("deploy", &[".yaml", ".yml"]);
    for dir in [
        "deploy/kubernetes",
        "deploy/compose",
        "deploy/prometheus",
        "deploy/grafana",
    ] {
        let any =
            yaml.iter().any(|f| f.starts_with(dir)) || !files_under(dir, &[".json"]).is_empty();
        assert!(any, "{dir} has no YAML or JSON file");
    }
    for file in &yaml {
        assert!(!yaml_docs(file).is_empty(), "{file}: no document");
    }
    for file in files_under("deploy", &[".json"]) {
        serde_json::from_str::<Json>(&read(&file))
            .unwrap_or_else(|e| panic!("{file}: not valid JSON: {e}"));
    }
}

#[test]
fn kustomization_lists_every_manifest() {
    let kustomization = &yaml_docs("deploy/kubernetes/kustomization.yaml")[0];
    let listed: BTreeSet<String> = seq(&kustomization["resources"])
        .iter()
        .filter_map(text)
        .collect();
    let present: BTreeSet<String> = files_under("deploy/kubernetes", &[".yaml", ".yml"])
        .into_iter()
        .map(|f| f.rsplit('/').next().unwrap().to_string())
        .filter(|f| f != "kustomization.yaml")
        .collect();
    assert_eq!(
        listed, present,
        "kustomization.yaml resources must be exactly the manifests of deploy/kubernetes"
    );
    for doc in kubernetes().docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        assert!(
            doc["apiVersion"].is_string()
                && !kind.is_empty()
                && doc["metadata"]["name"].is_string(),
            "a manifest without apiVersion, kind or metadata.name: {doc:?}"
        );
        // Cluster-scoped kinds have no namespace (kustomize sets none).
        if !["Namespace", "ClusterRole", "ClusterRoleBinding"].contains(&kind) {
            assert_eq!(
                doc["metadata"]["namespace"].as_str(),
                kustomization["namespace"].as_str(),
                "{kind} {:?}: namespace",
                doc["metadata"]["name"]
            );
        }
    }
}

#[test]
fn grafana_dashboard_is_well_formed() {
    let dashboard: Json = serde_json::from_str(&read("deploy/grafana/unicron.json")).unwrap();
    assert!(
        dashboard["schemaVersion"].as_i64().unwrap_or(0) >= 36,
        "schemaVersion"
    );
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a `datasource` variable of Prometheus data sources"
    );
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(
            ids.insert(panel["id"].as_i64().expect("panel id")),
            "{title}: duplicate id"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{title}: data source"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(
                !metric_refs(expr).is_empty(),
                "{title}: query `{expr}` reads no unicron metric"
            );
            queries += 1;
        }
    }
    assert!(queries >= 15, "only {queries} queries");
}

#[test]
fn alert_rules_are_well_formed_and_cover_the_failure_modes() {
    let file = &yaml_docs("deploy/prometheus/alerts.yml")[0];
    let mut names = BTreeSet::new();
    let mut rules = Vec::new();
    for group in seq(&file["groups"]) {
        assert!(group["name"].is_string(), "a group without a name");
        for rule in seq(&group["rules"]) {
            let name = rule["alert"].as_str().expect("an alert name").to_string();
            assert!(names.insert(name.clone()), "{name}: defined twice");
            let expr = rule["expr"].as_str().unwrap_or_default().to_string();
            assert!(!expr.trim().is_empty(), "{name}: no expr");
            let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
            assert!(
                ["warning", "critical"].contains(&severity),
                "{name}: severity `{severity}`"
            );
            assert!(
                rule["annotations"]["summary"].is_string(),
                "{name}: no summary"
            );
            if let Some(duration) = rule["for"].as_str() {
                assert!(
                    duration.ends_with('m') || duration.ends_with('s'),
                    "{name}: for `{duration}`"
                );
            }
            rules.push((expr, severity.to_string()));
        }
    }
    let covered = |needles: &[&str], severity: &str| {
        rules
            .iter()
            .any(|(expr, s)| s == severity && needles.iter().all(|n| expr.contains(n)))
    };
    for (needles, severity) in [
        (&["unicron_consumer_lag_records", "detector"][..], "warning"),
        (&["unicron_dlq_records_total"][..], "warning"),
        (&["unicron_planner_decision_seconds"][..], "warning"),
        (
            &["unicron_executor_rejections_total", "forged", "unsigned"][..],
            "critical",
        ),
        (&["unicron_service_ready"][..], "critical"),
        (&["up{"][..], "critical"),
        (&["unicron_planner_waf"][..], "warning"),
    ] {
        assert!(
            covered(needles, severity),
            "no {severity} rule whose expr has {needles:?}"
        );
    }
}

/// The site's `remote_write` block keeps exactly the series the detector's
/// default metric rules read, the labels its default label map looks for
/// first, and posts to the receiver's path and default port.
#[test]
fn remote_write_block_keeps_what_the_detector_reads() {
    let config = &yaml_docs("deploy/prometheus/remote-write.yml")[0];
    let writer = &seq(&config["remote_write"])[0];
    let url = text(&writer["url"]).unwrap();
    let defaults = unicron_remote_write::RemoteWriteSettings::default();
    assert!(
        url.ends_with(&format!(
            ":{}{}",
            defaults.listen.port(),
            unicron_remote_write::PATH
        )),
        "{url}"
    );
    let rules = seq(&writer["write_relabel_configs"]);
    let regex_of = |action: &str| {
        let rule = rules
            .iter()
            .find(|r| text(&r["action"]).as_deref() == Some(action))
            .unwrap_or_else(|| panic!("no `{action}` rule"));
        let regex = text(&rule["regex"]).unwrap();
        regex
            .split('|')
            .map(str::to_string)
            .collect::<BTreeSet<_>>()
    };
    let tuning = unicron_core::detector::DetectorConfig::default();
    let mut read: BTreeSet<String> = tuning
        .counter_rules
        .iter()
        .map(|r| r.metric.clone())
        .chain(tuning.gauge_rules.iter().map(|r| r.metric.clone()))
        .collect();
    read.insert(unicron_core::detector::metric_rules::XID_LAST.to_string());
    read.insert(unicron_core::detector::metric_rules::XID_COUNT.to_string());
    assert_eq!(regex_of("keep"), read, "the kept series");
    let labels = regex_of("labelkeep");
    let map = unicron_codec::formats::LabelMap::default();
    for needed in [
        "__name__",
        "xid",
        &map.node[0],
        &map.gpu[0],
        &map.cluster[0],
    ] {
        assert!(labels.contains(needed), "labelkeep drops `{needed}`");
    }
}

#[test]
fn prometheus_scrapes_the_compose_services_and_loads_the_rules() {
    let config = &yaml_docs("deploy/prometheus/prometheus.yml")[0];
    let rule_files: Vec<String> = seq(&config["rule_files"]).iter().filter_map(text).collect();
    for rule_file in &rule_files {
        assert!(
            repo().join("deploy/prometheus").join(rule_file).is_file(),
            "rule file {rule_file} missing"
        );
    }
    assert!(
        rule_files.iter().any(|f| f == "alerts.yml"),
        "alerts.yml not loaded"
    );
    let compose = compose();
    let mut targets = BTreeSet::new();
    for job in seq(&config["scrape_configs"]) {
        for group in seq(&job["static_configs"]) {
            targets.extend(seq(&group["targets"]).iter().filter_map(text));
        }
    }
    let expected: BTreeSet<String> = compose
        .unicron_services()
        .map(|(name, service)| {
            let env = service.env();
            let listen = effective(&service.config_text(), &env, "metrics.listen").unwrap();
            format!("{name}:{}", port_of(&listen))
        })
        .collect();
    assert_eq!(
        targets, expected,
        "static targets must be every long-running compose service at its metrics port"
    );
}

// ---------------------------------------------------------------------------
// Kubernetes

struct Kubernetes {
    docs: Vec<Yaml>,
}

/// One unicron container of a workload, with what the test needs of it.
struct Pod<'a> {
    name: String,
    workload: &'a Yaml,
    spec: &'a Yaml,
    container: &'a Yaml,
}

fn kubernetes() -> Kubernetes {
    let kustomization = &yaml_docs("deploy/kubernetes/kustomization.yaml")[0];
    let mut docs = Vec::new();
    for resource in seq(&kustomization["resources"]).iter().filter_map(text) {
        docs.extend(yaml_docs(&format!("deploy/kubernetes/{resource}")));
    }
    Kubernetes { docs }
}

impl Kubernetes {
    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Yaml> + 'a {
        self.docs.iter().filter(move |d| d["kind"] == kind)
    }

    fn named(&self, kind: &str, name: &str) -> Option<&Yaml> {
        self.docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
    }

    fn secret(&self, name: &str, key: &str) -> String {
        let secret = self
            .named("Secret", name)
            .unwrap_or_else(|| panic!("Secret {name} is not in the manifests"));
        text(&secret["stringData"][key])
            .unwrap_or_else(|| panic!("Secret {name} has no stringData key {key}"))
    }

    fn pods(&self) -> Vec<Pod<'_>> {
        let mut pods = Vec::new();
        for doc in &self.docs {
            if !["Deployment", "StatefulSet", "Job"].contains(&doc["kind"].as_str().unwrap_or("")) {
                continue;
            }
            let spec = &doc["spec"]["template"]["spec"];
            for container in seq(&spec["containers"]) {
                if container["image"]
                    .as_str()
                    .is_some_and(|i| i.starts_with("unicron:"))
                {
                    pods.push(Pod {
                        name: format!(
                            "{} {}",
                            doc["kind"].as_str().unwrap(),
                            doc["metadata"]["name"].as_str().unwrap()
                        ),
                        workload: doc,
                        spec,
                        container,
                    });
                }
            }
        }
        assert!(pods.len() >= 6, "only {} unicron containers", pods.len());
        pods
    }
}

impl Pod<'_> {
    fn argv(&self) -> Vec<String> {
        let mut argv: Vec<String> = seq(&self.container["command"])
            .iter()
            .filter_map(text)
            .collect();
        argv.extend(seq(&self.container["args"]).iter().filter_map(text));
        argv
    }

    fn subcommand(&self) -> String {
        subcommand(&self.argv()[1..]).join(" ")
    }

    /// The environment the container gets, placeholders replaced by stand-ins.
    fn env(&self, k8s: &Kubernetes, fill_placeholders: bool) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for var in seq(&self.container["env"]) {
            let name = var["name"].as_str().unwrap().to_string();
            let from = &var["valueFrom"];
            let value = if let Some(value) = text(&var["value"]) {
                value
            } else if from["fieldRef"]["fieldPath"] == "metadata.name" {
                format!("{}-0", self.name)
            } else if from["secretKeyRef"].is_mapping() {
                let secret = &from["secretKeyRef"];
                k8s.secret(
                    secret["name"].as_str().unwrap(),
                    secret["key"].as_str().unwrap(),
                )
            } else {
                panic!("{}: env {name}: unsupported source {from:?}", self.name);
            };
            let value = if fill_placeholders && value.contains(PLACEHOLDER) {
                stand_in(&name)
            } else {
                value
            };
            env.insert(name, value);
        }
        env
    }

    fn volume(&self, name: &str) -> &Yaml {
        if let Some(volume) = seq(&self.spec["volumes"])
            .iter()
            .find(|v| v["name"] == name)
        {
            return volume;
        }
        seq(&self.workload["spec"]["volumeClaimTemplates"])
            .iter()
            .find(|t| t["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{}: no volume {name}", self.name))
    }

    /// The mount `path` lives under, and the volume behind it.
    fn mount_of(&self, path: &str) -> Option<(String, &Yaml)> {
        seq(&self.container["volumeMounts"])
            .iter()
            .filter_map(|m| {
                let at = m["mountPath"].as_str()?;
                let inside =
                    path == at || path.starts_with(&format!("{}/", at.trim_end_matches('/')));
                inside.then(|| (at.to_string(), self.volume(m["name"].as_str().unwrap())))
            })
            .max_by_key(|(at, _)| at.len())
    }

    /// The file at `path` as the container sees it through a ConfigMap or Secret volume.
    fn file(&self, k8s: &Kubernetes, path: &str) -> String {
        let (at, volume) = self
            .mount_of(path)
            .unwrap_or_else(|| panic!("{}: nothing is mounted at {path}", self.name));
        let file_name = path[at.len()..].trim_start_matches('/');
        let (kind, name) = if volume["configMap"].is_mapping() {
            ("ConfigMap", volume["configMap"]["name"].as_str().unwrap())
        } else if volume["secret"].is_mapping() {
            ("Secret", volume["secret"]["secretName"].as_str().unwrap())
        } else {
            panic!(
                "{}: {path} is not on a ConfigMap or Secret volume",
                self.name
            )
        };
        let source = &volume[if kind == "Secret" {
            "secret"
        } else {
            "configMap"
        }];
        let key = match source["items"].as_sequence() {
            Some(items) => items
                .iter()
                .find(|i| i["path"] == file_name)
                .and_then(|i| i["key"].as_str())
                .unwrap_or_else(|| panic!("{}: {path} is not an item of {kind} {name}", self.name))
                .to_string(),
            None => file_name.to_string(),
        };
        let object = k8s
            .named(kind, name)
            .unwrap_or_else(|| panic!("{}: {kind} {name} is not in the manifests", self.name));
        let data = if kind == "Secret" {
            "stringData"
        } else {
            "data"
        };
        text(&object[data][key.as_str()])
            .unwrap_or_else(|| panic!("{}: {kind} {name} has no key {key} for {path}", self.name))
    }

    fn config_text(&self, k8s: &Kubernetes) -> String {
        let path = config_flag(&self.argv())
            .unwrap_or_else(|| panic!("{}: runs without --config", self.name));
        self.file(k8s, &path)
    }

    fn ports(&self) -> BTreeMap<String, u16> {
        seq(&self.container["ports"])
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().expect("named port").to_string(),
                    p["containerPort"].as_u64().expect("containerPort") as u16,
                )
            })
            .collect()
    }

    /// (probe, path, port number) of every HTTP probe.
    fn probes(&self) -> Vec<(String, String, u16)> {
        let ports = self.ports();
        ["livenessProbe", "readinessProbe", "startupProbe"]
            .iter()
            .filter(|p| self.container[**p].is_mapping())
            .map(|probe| {
                let get = &self.container[*probe]["httpGet"];
                let port = match &get["port"] {
                    Yaml::String(name) => *ports.get(name).unwrap_or_else(|| {
                        panic!("{}: {probe} names port {name}, not declared", self.name)
                    }),
                    other => other.as_u64().expect("probe port") as u16,
                };
                let path = get["path"].as_str().expect("probe path").to_string();
                (probe.to_string(), path, port)
            })
            .collect()
    }
}

/// A value for a variable whose manifest value is left to the operator.
fn stand_in(variable: &str) -> String {
    if variable.starts_with("UNICRON_EXECUTOR__PUBLIC_KEYS__") {
        STAND_IN_PUBLIC_KEY.to_string()
    } else {
        "stand-in".to_string()
    }
}

#[test]
fn kubernetes_configs_load_with_each_pods_environment() {
    let k8s = kubernetes();
    for pod in k8s.pods() {
        assert_loads(&pod.name, &pod.config_text(&k8s), &pod.env(&k8s, true));
    }
}

#[test]
fn unfilled_secret_placeholders_stop_the_services() {
    let k8s = kubernetes();
    let executor = k8s
        .pods()
        .into_iter()
        .find(|p| p.subcommand() == "executor")
        .expect("an executor");
    let out = load_config(&executor.config_text(&k8s), &executor.env(&k8s, false));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an executor with the template's public key placeholder must not start: {stderr}"
    );
    assert!(
        stderr.contains("executor.public_keys."),
        "the error names the key: {stderr}"
    );

    let planner = k8s
        .pods()
        .into_iter()
        .find(|p| p.subcommand() == "planner")
        .expect("a planner");
    let config = planner.config_text(&k8s);
    let key_file = effective(&config, &BTreeMap::new(), "planner.signing_key_file").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("planner.key");
    std::fs::write(&path, planner.file(&k8s, &key_file)).unwrap();
    let out = unicron(
        &["keys", "public", "--key", path.to_str().unwrap()],
        &BTreeMap::new(),
    );
    assert!(
        !out.status.success(),
        "the template's signing key placeholder must be refused: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn kubernetes_ports_and_probes_match_the_config() {
    let k8s = kubernetes();
    for pod in k8s.pods() {
        let config = pod.config_text(&k8s);
        let env = pod.env(&k8s, true);
        let sub = pod.subcommand();
        if sub == "topics create" {
            assert!(
                pod.probes().is_empty(),
                "{}: a Job needs no probes",
                pod.name
            );
            continue;
        }
        let metrics = port_of(&effective(&config, &env, "metrics.listen").unwrap());
        let ports = pod.ports();
        assert_eq!(
            ports.get("metrics"),
            Some(&metrics),
            "{}: metrics port",
            pod.name
        );
        if sub == "planner" {
            let status =
                port_of(&effective(&config, &env, "status.listen").expect("status.listen"));
            assert_eq!(
                ports.get("status"),
                Some(&status),
                "{}: status port",
                pod.name
            );
        }
        let probes = pod.probes();
        let path_of = |probe: &str| {
            probes
                .iter()
                .find(|(p, _, _)| p == probe)
                .map(|(_, path, _)| path.as_str())
        };
        assert_eq!(path_of("livenessProbe"), Some("/healthz"), "{}", pod.name);
        assert_eq!(path_of("readinessProbe"), Some("/readyz"), "{}", pod.name);
        for (probe, _, port) in &probes {
            assert_eq!(
                *port, metrics,
                "{}: {probe} is not on the metrics port",
                pod.name
            );
        }
    }
    // Every Service selects unicron pods and targets ports they declare.
    let pods = k8s.pods();
    for service in k8s.of_kind("Service") {
        let name = service["metadata"]["name"].as_str().unwrap();
        let selector = service["spec"]["selector"].as_mapping().expect("selector");
        let selected: Vec<_> = pods
            .iter()
            .filter(|p| {
                let labels = &p.workload["spec"]["template"]["metadata"]["labels"];
                selector
                    .iter()
                    .all(|(k, v)| &labels[k.as_str().unwrap()] == v)
            })
            .collect();
        assert!(!selected.is_empty(), "Service {name} selects no pod");
        for port in seq(&service["spec"]["ports"]) {
            let number = port["port"].as_u64().unwrap() as u16;
            for pod in &selected {
                let target = match &port["targetPort"] {
                    Yaml::String(target) => pod.ports().get(target).copied(),
                    other => other.as_u64().map(|p| p as u16),
                };
                assert_eq!(
                    target,
                    Some(number),
                    "Service {name} port {number} does not reach {}",
                    pod.name
                );
            }
        }
    }
}

#[test]
fn kubernetes_state_and_keys_are_mounted_where_the_config_says() {
    let k8s = kubernetes();
    for pod in k8s.pods() {
        let config = pod.config_text(&k8s);
        let env = pod.env(&k8s, true);
        let persistent = |key: &str| {
            let path = effective(&config, &env, key).unwrap();
            let (_, volume) = pod
                .mount_of(&path)
                .unwrap_or_else(|| panic!("{}: {key} = {path} is on no volume", pod.name));
            assert!(
                volume["persistentVolumeClaim"].is_mapping() || volume["spec"].is_mapping(),
                "{}: {key} = {path} is not on a persistent volume",
                pod.name
            );
        };
        match pod.subcommand().as_str() {
            "planner" => {
                persistent("planner.state_dir");
                let key_file = effective(&config, &env, "planner.signing_key_file")
                    .expect("planner.signing_key_file");
                pod.file(&k8s, &key_file);
                // Beyond loopback the page needs its tokens, from a Secret.
                let table: toml::Table = config.parse().unwrap();
                let tokens = table["status"]["tokens"].as_array().expect("status.tokens");
                assert!(!tokens.is_empty(), "the planner's status page has no token");
                for t in tokens {
                    let file = pod.file(&k8s, t["token_file"].as_str().unwrap());
                    assert!(file.starts_with("REPLACE_WITH"), "a template: {file}");
                }
            }
            "executor" => persistent("executor.state_dir"),
            "archiver" => persistent("archiver.dir"),
            _ => {}
        }
        if let Some(ca) = effective(&config, &env, "kafka.ssl.ca.location") {
            pod.file(&k8s, &ca);
        }
    }
}

#[test]
fn kubernetes_executors_are_one_per_cluster_and_trust_the_planner_key() {
    let k8s = kubernetes();
    let pods = k8s.pods();
    let planner = pods.iter().find(|p| p.subcommand() == "planner").unwrap();
    let key_id = effective(
        &planner.config_text(&k8s),
        &BTreeMap::new(),
        "planner.key_id",
    )
    .unwrap();
    let mut clusters = BTreeSet::new();
    let mut claims = BTreeSet::new();
    for pod in pods.iter().filter(|p| p.subcommand() == "executor") {
        let env = pod.env(&k8s, true);
        let config = pod.config_text(&k8s);
        let cluster = effective(&config, &env, "executor.cluster").unwrap();
        assert!(
            clusters.insert(cluster.clone()),
            "two executors for cluster {cluster}"
        );
        // No default backend: each executor must be given its own.
        assert_eq!(
            effective(&config, &env, "executor.backend.kind").as_deref(),
            Some("http"),
            "executor of {cluster}"
        );
        assert!(
            effective(&config, &env, "executor.backend.url").is_some(),
            "executor of {cluster}"
        );
        assert_eq!(
            pod.workload["spec"]["replicas"].as_u64(),
            Some(1),
            "{}",
            pod.name
        );
        assert_eq!(
            pod.workload["spec"]["strategy"]["type"].as_str(),
            Some("Recreate"),
            "{}: two pods must never share the dedupe table",
            pod.name
        );
        let state = effective(&config, &env, "executor.state_dir").unwrap();
        let (_, volume) = pod.mount_of(&state).unwrap();
        let claim = volume["persistentVolumeClaim"]["claimName"]
            .as_str()
            .unwrap();
        assert!(
            k8s.named("PersistentVolumeClaim", claim).is_some(),
            "{}: PVC {claim} is not in the manifests",
            pod.name
        );
        assert!(
            claims.insert(claim.to_string()),
            "executors share PVC {claim}"
        );
        let trusted = format!(
            "UNICRON_EXECUTOR__PUBLIC_KEYS__{}",
            key_id.to_ascii_uppercase()
        );
        assert!(
            env.contains_key(&trusted),
            "{}: does not trust the planner's key_id {key_id} ({trusted})",
            pod.name
        );
    }
    assert!(
        clusters.len() >= 2,
        "the example has two clusters: {clusters:?}"
    );
}

// ---------------------------------------------------------------------------
// Compose

struct Compose {
    doc: Yaml,
}

struct ComposeService<'a> {
    name: String,
    service: &'a Yaml,
}

fn compose() -> Compose {
    Compose {
        doc: yaml_docs("deploy/compose/compose.yaml").remove(0),
    }
}

impl Compose {
    fn services(&self) -> impl Iterator<Item = (String, &Yaml)> {
        self.doc["services"]
            .as_mapping()
            .expect("services")
            .iter()
            .map(|(k, v)| (k.as_str().unwrap().to_string(), v))
    }

    /// Long-running unicron services (the one-shot topics service excluded).
    fn unicron_services(&self) -> impl Iterator<Item = (String, ComposeService<'_>)> {
        self.services()
            .filter(|(_, s)| s["image"] == "unicron:latest")
            .map(|(name, service)| (name.clone(), ComposeService { name, service }))
            .filter(|(_, s)| s.subcommand() != "topics create")
    }
}

impl ComposeService<'_> {
    /// The image's entrypoint, then `command`.
    fn argv(&self) -> Vec<String> {
        let mut argv = vec![dockerfile_entrypoint()];
        argv.extend(seq(&self.service["command"]).iter().filter_map(text));
        argv
    }

    fn subcommand(&self) -> String {
        subcommand(&self.argv()[1..]).join(" ")
    }

    fn env(&self) -> BTreeMap<String, String> {
        let env = &self.service["environment"];
        let mut out = BTreeMap::new();
        if let Some(map) = env.as_mapping() {
            for (k, v) in map {
                out.insert(k.as_str().unwrap().to_string(), text(v).unwrap_or_default());
            }
        }
        for item in seq(env).iter().filter_map(text) {
            let (k, v) = item.split_once('=').expect("KEY=VALUE");
            out.insert(k.to_string(), v.to_string());
        }
        out
    }

    /// (host source, container target) of every volume.
    fn volumes(&self) -> Vec<(String, String)> {
        seq(&self.service["volumes"])
            .iter()
            .filter_map(text)
            .map(|v| {
                let mut parts = v.split(':');
                (
                    parts.next().unwrap().to_string(),
                    parts.next().expect("SOURCE:TARGET").to_string(),
                )
            })
            .collect()
    }

    /// The host source `path` comes from, and the path inside it.
    fn source_of(&self, path: &str) -> Option<(String, String)> {
        self.volumes()
            .into_iter()
            .filter(|(_, target)| path == target || path.starts_with(&format!("{target}/")))
            .max_by_key(|(_, target)| target.len())
            .map(|(source, target)| {
                (
                    source,
                    path[target.len()..].trim_start_matches('/').to_string(),
                )
            })
    }

    fn host_file(&self, path: &str) -> PathBuf {
        let (source, rest) = self
            .source_of(path)
            .unwrap_or_else(|| panic!("compose {}: nothing is mounted at {path}", self.name));
        assert!(
            source.starts_with("./"),
            "compose {}: {path} is not a file of deploy/compose",
            self.name
        );
        let mut file = repo().join("deploy/compose").join(&source);
        if !rest.is_empty() {
            file = file.join(rest);
        }
        assert!(
            file.is_file(),
            "compose {}: {} missing",
            self.name,
            file.display()
        );
        file
    }

    fn config_text(&self) -> String {
        let path = config_flag(&self.argv()).expect("--config");
        std::fs::read_to_string(self.host_file(&path)).unwrap()
    }
}

fn dockerfile_entrypoint() -> String {
    let dockerfile = read("deploy/docker/Dockerfile");
    let line = dockerfile
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .expect("ENTRYPOINT");
    let argv: Vec<String> =
        serde_json::from_str(line["ENTRYPOINT".len()..].trim()).expect("exec form");
    argv[0].clone()
}

#[test]
fn compose_configs_load_with_each_services_environment() {
    let compose = compose();
    let mut loaded = 0;
    for (name, service) in compose.services() {
        if service["image"] != "unicron:latest" {
            continue;
        }
        let service = ComposeService { name, service };
        assert_loads(
            &format!("compose {}", service.name),
            &service.config_text(),
            &service.env(),
        );
        loaded += 1;
    }
    assert!(
        loaded >= 6,
        "topics, planner, detector, executor, archiver, sim"
    );
}

#[test]
fn compose_runs_kraft_kafka_then_topics_then_the_services() {
    let compose = compose();
    let kafka = &compose.doc["services"]["kafka"];
    assert!(
        kafka["image"]
            .as_str()
            .unwrap()
            .starts_with("apache/kafka:"),
        "Apache Kafka"
    );
    let env = &kafka["environment"];
    assert!(
        env["KAFKA_PROCESS_ROLES"]
            .as_str()
            .unwrap()
            .contains("controller"),
        "KRaft: the broker is its own controller"
    );
    assert!(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].is_string());
    let advertised = env["KAFKA_ADVERTISED_LISTENERS"].as_str().unwrap();

    let topics = ComposeService {
        name: "topics".into(),
        service: &compose.doc["services"]["topics"],
    };
    assert_eq!(topics.subcommand(), "topics create");
    assert_eq!(
        topics.service["depends_on"]["kafka"]["condition"], "service_healthy",
        "topics waits for Kafka"
    );
    assert!(kafka["healthcheck"].is_mapping(), "Kafka has a healthcheck");
    let brokers = effective(&topics.config_text(), &topics.env(), "kafka.brokers").unwrap();
    for broker in brokers.split(',') {
        assert!(
            advertised.contains(&format!("//{broker}")),
            "kafka.brokers {broker} is not a listener Kafka advertises ({advertised})"
        );
    }
    let mut subcommands = BTreeSet::new();
    for (name, service) in compose.unicron_services() {
        assert_eq!(
            service.service["depends_on"]["topics"]["condition"], "service_completed_successfully",
            "compose {name} starts after the topics exist"
        );
        subcommands.insert(service.subcommand());
    }
    for expected in ["planner", "detector", "executor", "archiver", "sim"] {
        assert!(
            subcommands.contains(expected),
            "no compose service runs `unicron {expected}`"
        );
    }
}

#[test]
fn compose_ports_volumes_and_the_simulator_backend_agree_with_the_config() {
    let compose = compose();
    let mut host_ports = BTreeSet::new();
    let mut sim_endpoint = None;
    let mut executor_url = None;
    let image_dirs = read("deploy/docker/Dockerfile");
    for (name, service) in compose.unicron_services() {
        let config = service.config_text();
        let env = service.env();
        let metrics = port_of(&effective(&config, &env, "metrics.listen").unwrap());
        let mut container_ports = BTreeSet::new();
        for mapping in seq(&service.service["ports"]).iter().filter_map(text) {
            let (host, container) = mapping.split_once(':').expect("HOST:CONTAINER");
            assert!(
                host_ports.insert(host.to_string()),
                "host port {host} published twice"
            );
            container_ports.insert(container.parse::<u16>().unwrap());
        }
        assert!(
            container_ports.contains(&metrics),
            "compose {name}: metrics port {metrics} not published"
        );
        let mut state = Vec::new();
        match service.subcommand().as_str() {
            "planner" => {
                let status = port_of(&effective(&config, &env, "status.listen").unwrap());
                assert!(
                    container_ports.contains(&status),
                    "compose planner: status port"
                );
                service.host_file(&effective(&config, &env, "planner.signing_key_file").unwrap());
                state.push(effective(&config, &env, "planner.state_dir").unwrap());
            }
            "executor" => {
                state.push(effective(&config, &env, "executor.state_dir").unwrap());
                assert_eq!(
                    effective(&config, &env, "executor.backend.kind").as_deref(),
                    Some("simulator")
                );
                executor_url = effective(&config, &env, "executor.backend.url");
            }
            "archiver" => state.push(effective(&config, &env, "archiver.dir").unwrap()),
            "sim" => {
                let listen = effective(&config, &env, "sim.listen").unwrap();
                sim_endpoint = Some(format!("http://{name}:{}/", port_of(&listen)));
            }
            _ => {}
        }
        for dir in state {
            let (source, rest) = service
                .source_of(&dir)
                .unwrap_or_else(|| panic!("compose {name}: {dir} is on no volume"));
            let named = compose.doc["volumes"].as_mapping().expect("volumes");
            assert!(
                rest.is_empty() && named.contains_key(source.as_str()),
                "compose {name}: {dir} must be a named volume of its own"
            );
            // A fresh named volume takes the owner of the image's directory.
            assert!(
                image_dirs.contains(&dir),
                "compose {name}: the image does not create {dir} for the unicron user"
            );
        }
    }
    let (sim, url) = (
        sim_endpoint.expect("a sim service"),
        executor_url.expect("an executor"),
    );
    assert!(
        url.starts_with(&sim),
        "the executor's backend {url} is not the simulator's endpoint {sim}"
    );
}

#[test]
fn compose_dev_key_matches_the_key_the_executor_trusts() {
    let compose = compose();
    let (_, planner) = compose
        .unicron_services()
        .find(|(_, s)| s.subcommand() == "planner")
        .unwrap();
    let config = planner.config_text();
    let env = planner.env();
    let key_file =
        planner.host_file(&effective(&config, &env, "planner.signing_key_file").unwrap());
    let key_id = effective(&config, &env, "planner.key_id").unwrap();
    let out = unicron(
        &["keys", "public", "--key", key_file.to_str().unwrap()],
        &BTreeMap::new(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "unicron keys public: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = stdout
        .trim()
        .strip_prefix("public key: ")
        .unwrap_or_else(|| panic!("unexpected output {stdout:?}"));
    let (_, executor) = compose
        .unicron_services()
        .find(|(_, s)| s.subcommand() == "executor")
        .unwrap();
    let trusted = effective(
        &executor.config_text(),
        &executor.env(),
        &format!("executor.public_keys.{key_id}"),
    );
    assert_eq!(
        trusted.as_deref(),
        Some(public),
        "the compose executor must trust the dev key as `{key_id}`"
    );
}

// ---------------------------------------------------------------------------
// systemd

/// A unit file as (section, key, value) triples, with specifiers expanded.
struct Unit {
    file: String,
    entries: Vec<(String, String, String)>,
}

fn unit(file: &str, instance: &str) -> Unit {
    let name = file.replace("@.", &format!("@{instance}."));
    let mut entries = Vec::new();
    let mut section = String::new();
    for line in read(&format!("deploy/systemd/{file}")).lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[') {
            section = s.trim_end_matches(']').to_string();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{file}: `{line}` is not KEY=VALUE"));
        let value = value
            .replace("%i", instance)
            .replace("%H", "host")
            .replace("%d", &format!("/run/credentials/{name}"));
        entries.push((section.clone(), key.to_string(), value));
    }
    Unit {
        file: file.to_string(),
        entries,
    }
}

impl Unit {
    fn all(&self, key: &str) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(s, k, _)| s == "Service" && k == key)
            .map(|(_, _, v)| v.as_str())
            .collect()
    }

    fn one(&self, key: &str) -> &str {
        match self.all(key)[..] {
            [value] => value,
            ref values => panic!("{}: {key} set {} times", self.file, values.len()),
        }
    }

    fn argv(&self) -> Vec<String> {
        self.one("ExecStart")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    fn subcommand(&self) -> String {
        subcommand(&self.argv()[1..]).join(" ")
    }

    /// Environment= first, then each EnvironmentFile= (read from the example
    /// of the same name in deploy/systemd), which overrides it.
    fn env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for assignments in self.all("Environment") {
            for assignment in assignments.split_whitespace() {
                let (k, v) = assignment.split_once('=').expect("KEY=VALUE");
                env.insert(k.to_string(), v.to_string());
            }
        }
        for file in self.all("EnvironmentFile") {
            let (optional, path) = match file.strip_prefix('-') {
                Some(path) => (true, path),
                None => (false, file),
            };
            let example = repo()
                .join("deploy/systemd")
                .join(Path::new(path).file_name().unwrap());
            if !example.is_file() {
                assert!(optional, "{}: no example of the required {path}", self.file);
                continue;
            }
            for line in std::fs::read_to_string(&example).unwrap().lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (k, v) = line.split_once('=').expect("KEY=VALUE");
                let v = if v.contains(PLACEHOLDER) {
                    stand_in(k)
                } else {
                    v.to_string()
                };
                env.insert(k.to_string(), v);
            }
        }
        env
    }

    fn config_text(&self) -> String {
        let path = config_flag(&self.argv()).expect("--config");
        let example = repo()
            .join("deploy/systemd")
            .join(Path::new(&path).file_name().unwrap());
        std::fs::read_to_string(&example)
            .unwrap_or_else(|e| panic!("{}: example of {path}: {e}", self.file))
    }
}

const UNITS: [(&str, &str); 4] = [
    ("unicron-planner.service", ""),
    ("unicron-detector.service", ""),
    ("unicron-executor@.service", "cluster-a"),
    ("unicron-archiver.service", ""),
];

fn units() -> Vec<Unit> {
    UNITS
        .iter()
        .map(|(file, instance)| unit(file, instance))
        .collect()
}

#[test]
fn systemd_configs_load_with_each_units_environment() {
    for unit in units() {
        assert_eq!(
            unit.argv()[..3],
            [
                "/usr/local/bin/unicron",
                "--config",
                "/etc/unicron/unicron.toml"
            ],
            "{}: ExecStart",
            unit.file
        );
        assert_loads(&unit.file, &unit.config_text(), &unit.env());
    }
}

#[test]
fn systemd_units_on_one_host_do_not_collide() {
    let mut ports = BTreeMap::new();
    for unit in units() {
        let (config, env) = (unit.config_text(), unit.env());
        let port = port_of(&effective(&config, &env, "metrics.listen").unwrap());
        if let Some(other) = ports.insert(port, unit.file.clone()) {
            panic!(
                "{} and {other} both serve metrics on port {port}",
                unit.file
            );
        }
        // State lives in the unit's StateDirectory (/var/lib/<dir>).
        let state_key = match unit.subcommand().as_str() {
            "planner" => Some("planner.state_dir"),
            "executor" => Some("executor.state_dir"),
            "archiver" => Some("archiver.dir"),
            _ => None,
        };
        if let Some(key) = state_key {
            let dir = effective(&config, &env, key).unwrap();
            assert_eq!(
                format!("/var/lib/{}", unit.one("StateDirectory")),
                dir,
                "{}: {key} is not the unit's StateDirectory",
                unit.file
            );
        }
        if unit.subcommand() == "executor" {
            assert_eq!(
                effective(&config, &env, "executor.cluster").as_deref(),
                Some("cluster-a"),
                "{}: the instance name is the cluster",
                unit.file
            );
            // No default backend: the unit's configuration names it.
            assert_eq!(
                effective(&config, &env, "executor.backend.kind").as_deref(),
                Some("http"),
                "{}",
                unit.file
            );
        }
        if unit.subcommand() == "planner" {
            let key_file = effective(&config, &env, "planner.signing_key_file").unwrap();
            let credential = unit.one("LoadCredential").split(':').next().unwrap();
            assert!(
                key_file.ends_with(&format!("/{credential}")),
                "{}: signing_key_file {key_file} is not the credential {credential}",
                unit.file
            );
        }
    }
}

#[test]
fn systemd_units_run_hardened_as_the_unicron_user() {
    let sysusers = read("deploy/systemd/unicron.sysusers.conf");
    for unit in units() {
        let user = unit.one("User");
        assert!(
            sysusers
                .lines()
                .any(|l| l.split_whitespace().take(2).eq(["u", user])),
            "{}: user {user} is not in unicron.sysusers.conf",
            unit.file
        );
        for (key, value) in [
            ("Restart", "on-failure"),
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("CapabilityBoundingSet", ""),
        ] {
            assert_eq!(unit.one(key), value, "{}: {key}", unit.file);
        }
    }
}

// ---------------------------------------------------------------------------
// Commands, the image and probe paths

/// Every unicron command line of the deployment files.
fn deployed_command_lines() -> Vec<(String, Vec<String>)> {
    let mut lines = Vec::new();
    let k8s = kubernetes();
    for pod in k8s.pods() {
        lines.push((pod.name.clone(), pod.argv()));
    }
    let compose = compose();
    for (name, service) in compose.services() {
        if service["image"] == "unicron:latest" {
            let service = ComposeService { name, service };
            lines.push((format!("compose {}", service.name), service.argv()));
        }
    }
    for unit in units() {
        lines.push((unit.file.clone(), unit.argv()));
    }
    lines
}

#[test]
fn deployed_subcommands_and_flags_exist() {
    let entrypoint = dockerfile_entrypoint();
    for (what, argv) in deployed_command_lines() {
        assert_eq!(
            argv[0], entrypoint,
            "{what}: runs {} not the image's binary",
            argv[0]
        );
        // clap rejects an unknown subcommand or flag before it prints --help.
        let mut args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        args.push("--help");
        let out = unicron(&args, &BTreeMap::new());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{what}: `unicron {}` is not a valid command line: {}",
            argv[1..].join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let usage = format!("Usage: unicron {}", subcommand(&argv[1..]).join(" "));
        assert!(
            stdout.contains(&usage),
            "{what}: help is not for {usage}: {stdout}"
        );
    }
}

#[test]
fn dockerfile_builds_the_workspace_binary_with_its_rust_version() {
    let dockerfile = read("deploy/docker/Dockerfile");
    let workspace: toml::Table = read("Cargo.toml").parse().unwrap();
    let rust = workspace["workspace"]["package"]["rust-version"]
        .as_str()
        .unwrap();
    assert!(
        dockerfile.contains(&format!("FROM rust:{rust}-")),
        "the build stage must use the workspace's rust-version {rust}"
    );
    assert!(dockerfile.contains("cargo build --release -p unicron --no-default-features"));
    // A deployment image leaves the simulator out; the compose demo,
    // which runs `sim`, builds it in.
    assert!(dockerfile.contains("ARG FEATURES=gssapi\n"), "{dockerfile}");
    let compose = read("deploy/compose/compose.yaml");
    assert!(compose.contains("\"sim\"]"), "the demo runs the simulator");
    assert_eq!(
        compose.matches("FEATURES: \"gssapi simulator\"").count(),
        2,
        "both build sections of the compose demo build the simulator in"
    );
    assert!(dockerfile.contains("FROM debian:bookworm-slim"));
    assert_eq!(dockerfile_entrypoint(), "/usr/local/bin/unicron");
    assert!(
        repo()
            .join("deploy/docker/Dockerfile.dockerignore")
            .is_file(),
        "without it the build context includes target/"
    );
}

/// The status line of `GET path` on `addr`.
fn http_status(addr: &str, path: &str) -> String {
    common::http_get(addr, path)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn probe_paths_are_served_by_the_metrics_endpoint() {
    let k8s = kubernetes();
    let mut paths: BTreeSet<String> = k8s
        .pods()
        .iter()
        .flat_map(|p| p.probes())
        .map(|(_, path, _)| path)
        .collect();
    assert!(
        paths.contains("/healthz") && paths.contains("/readyz"),
        "{paths:?}"
    );
    paths.insert("/metrics".to_string());
    // `unicron up` serves the same endpoint as the deployed services; the
    // duration only bounds the run if the endpoint never comes up.
    let child = Command::new(BIN)
        .args(["up", "--no-sim", "--no-archive", "--duration", "120s"])
        .env_clear()
        .env("UNICRON_METRICS__LISTEN", "127.0.0.1:0")
        .env("UNICRON_STATUS__LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start unicron up");
    let mut running = common::Running(child);
    let mut lines = BufReader::new(running.0.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut addr = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(url) = line.strip_prefix("metrics: http://") {
            addr = Some(url.trim_end_matches("/metrics").to_string());
            break;
        }
        seen.push(line);
    }
    // Keep reading: a closed pipe would make its next println! panic.
    std::thread::spawn(move || lines.for_each(drop));
    let addr = addr.unwrap_or_else(|| panic!("`unicron up` printed no metrics address: {seen:?}"));
    for path in &paths {
        let status = http_status(&addr, path);
        let ok = match path.as_str() {
            // Not ready yet is an answer too; 404 is not.
            "/readyz" => status.contains(" 200 ") || status.contains(" 503 "),
            _ => status.contains(" 200 "),
        };
        assert!(ok, "GET {path} on {addr}: {status}");
    }
}

// ---------------------------------------------------------------------------
// Runbooks and links

/// GitHub's anchor of a Markdown heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `path#anchor` resolves from `base` (a directory relative to the repository).
fn check_link(from: &str, base: &str, target: &str) -> Option<String> {
    if target.starts_with("http") {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file = if path.is_empty() {
        repo().join(from)
    } else {
        repo().join(base).join(path)
    };
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Some(format!("{from}: {target}: no file {}", file.display()));
    };
    if anchor.is_empty() {
        return None;
    }
    let found = text
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .any(|s| s == anchor);
    (!found).then(|| format!("{from}: {target}: no heading with anchor #{anchor}"))
}

#[test]
fn runbooks_and_doc_links_point_at_existing_sections() {
    let mut problems = Vec::new();
    let rules = &yaml_docs("deploy/prometheus/alerts.yml")[0];
    let mut runbooks = 0;
    for group in seq(&rules["groups"]) {
        for rule in seq(&group["rules"]) {
            let alert = rule["alert"].as_str().unwrap();
            let runbook = rule["annotations"]["runbook"]
                .as_str()
                .unwrap_or_else(|| panic!("{alert}: no runbook annotation"));
            problems.extend(check_link("deploy/prometheus/alerts.yml", "", runbook));
            runbooks += 1;
        }
    }
    assert!(runbooks > 0);
    for doc in ["docs/metrics.md", "docs/operations.md"] {
        let text = read(doc);
        for (at, _) in text.match_indices("](") {
            let target: String = text[at + 2..].chars().take_while(|c| *c != ')').collect();
            problems.extend(check_link(doc, "docs", &target));
        }
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}
