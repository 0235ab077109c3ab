//! The shape of the code, checked: no source file over 600 lines outside
//! tests and benches (one concern a file); no circle among the modules of
//! a crate at any depth (`b` naming `a` and `a` naming `b`, directly or
//! through others, whether through `crate::`, `super::` or `self::`), so
//! each crate reads from the bottom up; and services depend on libraries,
//! never on each other.

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
        // For each parent module, the edges among its children.
        let mut siblings: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> =
            BTreeMap::new();
        for file in rust_files(&src) {
            let relative = file.strip_prefix(&src).unwrap();
            if is_test_file(relative) {
                continue;
            }
            let from = module_path(relative);
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            for to in references(&from, &code) {
                if let Some((parent, a, b)) = sibling_edge(&from, &to) {
                    siblings
                        .entry(parent)
                        .or_default()
                        .entry(a)
                        .or_default()
                        .insert(b);
                }
            }
        }
        // A circle is an edge a -> b with a path b -> ... -> a.
        for (parent, uses) in &siblings {
            for (from, tos) in uses {
                for to in tos {
                    if let Some(path) = path_between(uses, to, from) {
                        circles.push(format!(
                            "{} {}: {from} -> {}",
                            src.strip_prefix(repo()).unwrap().display(),
                            parent.join("::"),
                            path.join(" -> ")
                        ));
                    }
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

/// The module a file is (`archive/writer.rs` → `archive::writer`;
/// `archive/mod.rs` → `archive`; `lib.rs` → the root).
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// The module paths `code` (the text of module `from`) names through
/// `crate::`, `super::` and `self::`, each as far as it goes, a braced
/// group giving one path per item.
fn references(from: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in (0..code.len()).filter(|&i| code.is_char_boundary(i)) {
        let before_ok = start == 0 || {
            let c = bytes[start - 1] as char;
            !(c.is_ascii_alphanumeric() || c == '_' || c == ':')
        };
        if !before_ok {
            continue;
        }
        let rest = &code[start..];
        let (mut base, mut tail) = if let Some(tail) = rest.strip_prefix("crate::") {
            (Vec::new(), tail)
        } else if rest.starts_with("super::") {
            let mut base = from.to_vec();
            let mut tail = rest;
            while let Some(t) = tail.strip_prefix("super::") {
                base.pop();
                tail = t;
            }
            (base, tail)
        } else if let Some(tail) = rest.strip_prefix("self::") {
            (from.to_vec(), tail)
        } else {
            continue;
        };
        loop {
            let name: String = tail
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                if let Some(group) = tail.strip_prefix('{') {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    for item in group.split(',') {
                        let item: String = item
                            .trim()
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if !item.is_empty() && item != "self" {
                            let mut path = base.clone();
                            path.push(item);
                            out.push(path);
                        }
                    }
                }
                break;
            }
            tail = &tail[name.len()..];
            base.push(name);
            match tail.strip_prefix("::") {
                Some(t) => tail = t,
                None => break,
            }
        }
        out.push(base);
    }
    out
}

/// The edge between siblings that `from` naming `to` makes: under their
/// nearest common parent, `from`'s side → `to`'s side. None when one is
/// inside the other (a module uses its own children or its parents).
fn sibling_edge(from: &[String], to: &[String]) -> Option<(Vec<String>, String, String)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    let (a, b) = (from.get(common)?, to.get(common)?);
    Some((from[..common].to_vec(), a.clone(), b.clone()))
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
    // `super::` and `self::` edges, and groups, are seen at every depth.
    let from = module_path(Path::new("archive/open_file.rs"));
    assert_eq!(from, ["archive", "open_file"]);
    let named = references(
        &from,
        "use super::writer::X;\nuse super::{layout, entry::E};",
    );
    assert!(named.contains(&vec!["archive".into(), "writer".into(), "X".into()]));
    assert!(named.contains(&vec!["archive".into(), "entry".into()]));
    assert_eq!(
        sibling_edge(&from, &named[0]),
        Some((vec!["archive".into()], "open_file".into(), "writer".into()))
    );
    assert_eq!(sibling_edge(&from, &["archive".into()]), None);
    assert_eq!(module_path(Path::new("planner/mod.rs")), ["planner"]);
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

/// The package names of the crates under `folder` (`crates`, `services`).
fn packages_in(folder: &str) -> BTreeMap<String, toml::Table> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(repo().join(folder)).unwrap().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("Cargo.toml")) else {
            continue;
        };
        let manifest: toml::Table = text.parse().unwrap();
        let name = manifest["package"]["name"].as_str().unwrap().to_string();
        out.insert(name, manifest);
    }
    out
}

/// Libraries never depend on a service; a service never depends on
/// another (what two services share is a library). Only the binary and
/// the cross-service tests put services together.
#[test]
fn services_depend_on_libraries_only() {
    let libraries = packages_in("crates");
    let services = packages_in("services");
    assert!(libraries.contains_key("unicron-core") && services.contains_key("unicron-agent"));
    let mut wrong = Vec::new();
    for (name, manifest) in libraries.iter().chain(&services) {
        if name == "unicron" {
            continue;
        }
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = manifest.get(section).and_then(|d| d.as_table()) else {
                continue;
            };
            for dep in deps.keys() {
                if services.contains_key(dep) {
                    wrong.push(format!("{name} [{section}] depends on the service {dep}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
