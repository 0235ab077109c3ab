//! The shape of the code, checked: no source file over 600 lines outside
//! tests and benches (one concern a file), and no circle among the
//! modules of a crate (`use crate::a` in `b` and `use crate::b` in `a`,
//! directly or through others), so each crate reads from the bottom up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, recursively, in order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The `src` directories of the workspace's crates.
fn crate_sources() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for parent in ["crates", "services", "tools"] {
        let mut dirs: Vec<_> = std::fs::read_dir(repo().join(parent))
            .unwrap()
            .flatten()
            .map(|e| e.path().join("src"))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out.push(repo().join("tests/src"));
    out
}

/// Whether `path` (relative to a crate's `src`) holds only tests.
fn is_test_file(relative: &Path) -> bool {
    relative.components().any(|c| {
        let c = c.as_os_str().to_string_lossy();
        let stem = c.trim_end_matches(".rs");
        stem == "tests" || stem.ends_with("_tests")
    })
}

/// The text of a source file without its `#[cfg(test)]` part and comments.
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level module a file belongs to (`None`: the crate root).
fn top_module(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_string_lossy();
    let name = first.trim_end_matches(".rs").to_string();
    (!matches!(name.as_str(), "lib" | "main")).then_some(name)
}

#[test]
fn no_source_file_is_longer_than_its_concern() {
    let mut long = Vec::new();
    let mut files = 0;
    for src in crate_sources() {
        for file in rust_files(&src) {
            let relative = file.strip_prefix(&src).unwrap();
            if is_test_file(relative) {
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&file).unwrap();
            let lines = text.lines().count();
            if lines > MAX_LINES {
                long.push(format!(
                    "{}: {lines} lines",
                    file.strip_prefix(repo()).unwrap().display()
                ));
            }
        }
    }
    assert!(files > 100, "only {files} source files found");
    assert!(
        long.is_empty(),
        "split these by concern (at most {MAX_LINES} lines outside tests):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_crate_has_a_circle_among_its_modules() {
    let mut circles = Vec::new();
    for src in crate_sources() {
        let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in rust_files(&src) {
            let relative = file.strip_prefix(&src).unwrap();
            let Some(module) = top_module(relative) else {
                continue;
            };
            if is_test_file(relative) {
                continue;
            }
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            for (at, _) in code.match_indices("crate::") {
                let name: String = code[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    uses.entry(module.clone()).or_default().insert(name);
                }
            }
        }
        // A circle is an edge a -> b with a path b -> ... -> a.
        for (from, tos) in &uses {
            for to in tos {
                if let Some(path) = path_between(&uses, to, from) {
                    circles.push(format!(
                        "{}: {from} -> {}",
                        src.strip_prefix(repo()).unwrap().display(),
                        path.join(" -> ")
                    ));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "module circles:\n{}",
        circles.join("\n")
    );
}

/// A path of `use crate::` edges from `from` to `to`, if there is one.
fn path_between(
    uses: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut queue = vec![vec![from.to_string()]];
    while let Some(path) = queue.pop() {
        let last = path.last().unwrap();
        if last == to {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in uses.get(last).into_iter().flatten() {
            let mut longer = path.clone();
            longer.push(next.clone());
            queue.push(longer);
        }
    }
    None
}

#[test]
fn the_checks_see_a_circle_and_a_long_file() {
    let mut uses = BTreeMap::new();
    uses.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    uses.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    uses.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        path_between(&uses, "b", "a"),
        Some(vec!["b".into(), "c".into(), "a".into()])
    );
    uses.get_mut("c").unwrap().clear();
    assert_eq!(path_between(&uses, "b", "a"), None);
    assert!(is_test_file(Path::new("model/tests.rs")));
    assert!(is_test_file(Path::new("offline/sparse_tests.rs")));
    assert!(!is_test_file(Path::new("model/actions.rs")));
    assert_eq!(
        code_of("use crate::a;\n// crate::b\n#[cfg(test)]\nuse crate::c;"),
        "use crate::a;"
    );
}

/// The codec crate (records, formats, topics, the archive format) links no
/// Kafka client, and history needs one only for its `kafka` feature: an
/// archive is read without rdkafka.
#[test]
fn reading_an_archive_links_no_kafka_client() {
    let manifest = |path: &str| -> toml::Table {
        std::fs::read_to_string(repo().join(path))
            .unwrap()
            .parse()
            .unwrap()
    };
    let codec = manifest("crates/codec/Cargo.toml");
    let deps = codec["dependencies"].as_table().unwrap();
    for kafka in ["rdkafka", "unicron-bus", "unicron-store"] {
        assert!(
            !deps.contains_key(kafka),
            "unicron-codec depends on {kafka}"
        );
    }
    let history = manifest("crates/history/Cargo.toml");
    let bus = &history["dependencies"]["unicron-bus"];
    assert_eq!(bus.get("optional").and_then(|v| v.as_bool()), Some(true));
    assert!(
        !history["dependencies"]
            .as_table()
            .unwrap()
            .contains_key("rdkafka")
    );
}
