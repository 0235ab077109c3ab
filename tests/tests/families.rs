//! Each pluggable family is defined once (failure kinds in
//! `unicron_core::taxonomy`, record types and topics in
//! `unicron_codec::record_types`, external formats in
//! `unicron_codec::formats`); every list kept elsewhere — schema files, the
//! topology, the simulator's mix, the docs' tables — is held to that
//! definition here, so a new member that is missing somewhere fails a test
//! that names the place.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use unicron_codec::formats::InputFormat;
use unicron_codec::schemas::RecordType;
use unicron_codec::{Topic, Topology};
use unicron_core::FailureKind;
use unicron_simulator::faults::{MIX, NOT_INJECTED};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The first column's backticked or bare names of the table that follows
/// `heading` in `doc`.
fn first_column(doc: &str, heading: &str) -> BTreeSet<String> {
    let text = read(doc);
    let after = &text[text
        .find(heading)
        .unwrap_or_else(|| panic!("{doc}: no `{heading}`"))..];
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .filter_map(|l| l.split('|').nth(1))
        .map(|cell| cell.trim().trim_matches('`').to_string())
        .collect()
}

fn symbols(kinds: impl IntoIterator<Item = FailureKind>) -> BTreeSet<String> {
    kinds.into_iter().map(|k| k.symbol().to_string()).collect()
}

#[test]
fn every_failure_kind_is_in_the_mix_or_left_out_on_purpose() {
    let mut seen: Vec<FailureKind> = MIX.iter().map(|(k, _)| *k).collect();
    seen.extend(NOT_INJECTED);
    seen.sort();
    let mut all = FailureKind::ALL.to_vec();
    all.sort();
    assert_eq!(
        seen, all,
        "the simulator's MIX + NOT_INJECTED must hold each kind once"
    );
}

#[test]
fn the_docs_tables_name_every_failure_kind() {
    let injected = symbols(MIX.iter().map(|(k, _)| *k));
    assert_eq!(
        first_column("docs/simulator.md", "| kind | share |"),
        injected,
        "docs/simulator.md's table of injected kinds"
    );
    // Lines name every kind but the two no log line means: a straggler is
    // a rate, unknown is what no rule says.
    let by_lines = symbols(
        FailureKind::ALL
            .iter()
            .copied()
            .filter(|k| !matches!(k, FailureKind::Straggler | FailureKind::Unknown)),
    );
    assert_eq!(
        first_column("docs/detector.md", "| kind | lines that mean it |"),
        by_lines,
        "docs/detector.md, `Which kind a line is`"
    );
    // The Avro enum is held to `ALL` by crates/codec/tests/schemas.rs.
}

#[test]
fn every_record_type_has_its_schema_file_topic_and_docs_row() {
    let files: BTreeSet<String> = std::fs::read_dir(repo().join("schemas"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".avsc").map(str::to_string)
        })
        .collect();
    let records: BTreeSet<String> = RecordType::ALL
        .iter()
        .map(|r| r.name().to_string())
        .collect();
    assert_eq!(files, records, "schemas/*.avsc against RecordType::ALL");

    let topology = Topology::builtin();
    let design = first_column("docs/design.md", "| topic | key | record |");
    for topic in Topic::ALL {
        let spec = topology
            .get(topic.suffix())
            .unwrap_or_else(|| panic!("topology/topics.toml has no `{}`", topic.suffix()));
        assert_eq!(spec.record, topic.record().name(), "{}", topic.suffix());
        let name = format!("unicron.{}", topic.suffix());
        assert!(
            design.contains(&name),
            "docs/design.md §3 has no row for {name}"
        );
    }
}

#[test]
fn the_docs_list_every_input_format() {
    let text = read("docs/detector.md");
    let row = text
        .lines()
        .find(|l| l.starts_with("| `format` |"))
        .expect("docs/detector.md: the `format` row of [[detector.inputs]]");
    let listed: BTreeSet<&str> = row.split('`').skip(3).step_by(2).collect();
    let ours: BTreeSet<&str> = InputFormat::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(listed, ours, "docs/detector.md's formats");
}

/// docs/extending.md walks through files; each must exist (the guide's
/// examples, `nomad`, `loki`, `pcie`, `SpareEvent`, `spares`, are the
/// files that are not there yet), and it names each family's registry.
#[test]
fn the_extending_guide_names_files_that_exist() {
    let guide = read("docs/extending.md");
    let named: Vec<&str> = guide
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            [
                "crates/",
                "services/",
                "deploy/",
                "schemas/",
                "topology/",
                "tests/",
            ]
            .iter()
            .any(|root| s.starts_with(root))
        })
        .collect();
    for registry in [
        "services/executor/src/backend/registry.rs",
        "crates/codec/src/formats/mod.rs",
        "crates/core/src/taxonomy.rs",
        "crates/codec/src/record_types.rs",
    ] {
        assert!(
            named.contains(&registry),
            "docs/extending.md does not name {registry}"
        );
    }
    let examples = ["nomad", "loki", "SpareEvent", "services/spares"];
    for path in named {
        if examples.iter().any(|e| path.contains(e)) {
            continue;
        }
        assert!(repo().join(path).exists(), "docs/extending.md names {path}");
    }
}
