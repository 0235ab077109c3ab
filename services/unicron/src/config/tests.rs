//! The configuration's tests: sections, environment overrides, the
//! shipped example, and arbitrary input.

#[allow(clippy::result_large_err)] // figment::Jail's closure signature
mod sections {
    use crate::config::*;

    /// Config tests read the process environment, which the env test
    /// changes; Jail serialises them.
    pub(super) fn jailed<T>(f: impl FnOnce() -> T) -> T {
        let mut out = None;
        figment::Jail::expect_with(|_| {
            out = Some(f());
            Ok(())
        });
        out.unwrap()
    }

    fn load_text(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unicron.toml");
        std::fs::write(&path, text).unwrap();
        jailed(|| Config::load(Some(&path)))
    }

    #[test]
    fn defaults_without_a_file() {
        let config = jailed(|| Config::load(None)).unwrap();
        assert_eq!(config.kafka.topic_prefix, "unicron.");
        assert!(config.kafka.brokers.is_none());
    }

    #[test]
    fn file_values_and_passthrough_properties_load() {
        let config = load_text(
            "[kafka]\nbrokers = \"k1:9092\"\nsecurity.protocol = \"SSL\"\n[metrics]\nlisten = \"0.0.0.0:9000\"\n",
        )
        .unwrap();
        assert_eq!(config.kafka.brokers.as_deref(), Some("k1:9092"));
        assert_eq!(config.metrics.listen.port(), 9000);
        assert_eq!(
            config.kafka.librdkafka_properties(),
            vec![("security.protocol".to_string(), "SSL".to_string())]
        );
    }

    #[test]
    fn errors_name_the_field_on_one_line() {
        let err = load_text("[metrics]\nlisten = \"not an address\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("metrics.listen"), "{err}");
        assert!(!err.contains('\n'));

        let err = load_text("[metrcs]\nlisten = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("metrcs"), "{err}");

        let err = load_text("[kafka]\nmax_record_bytes = 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "config: kafka.max_record_bytes: must be positive");

        let err = load_text("[kafka]\nreplication_factor = 1\nmin_insync_replicas = 2\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config: kafka.min_insync_replicas: 2 must be between 1 and kafka.replication_factor (1)"
        );

        let err = load_text("[kafka.retention_ms]\nclusters = 1000\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config: kafka.retention_ms.clusters: no such topic in topology/topics.toml"
        );
        let err = load_text("[kafka.retention_ms]\ncluster = 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config: kafka.retention_ms.cluster: must be positive or -1 (forever)"
        );

        let err = load_text("[embedded]\nbrokers = \"three\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("embedded.brokers"), "{err}");

        let err = load_text("[planner.tuning]\nsnapshot_overhead_budget = 2.0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config: planner.tuning.snapshot_overhead_budget: 2 is not a share between 0 and 1 (0.02: 2%)"
        );

        let err = load_text("[detector.tuning]\nhang_factor = 0.0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config: detector.tuning.hang_factor: must be a positive number, got 0"
        );

        let err = load_text("[detector]\noutage_grace_s = -1.0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config: detector.outage_grace_s: -1 is not between 0 and 3600 seconds"
        );

        let err = load_text("[[detector.inputs]]\ntopic = \"otel\"\nformat = \"otlp_json\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config: detector.inputs[0].signal:"),
            "{err}"
        );

        let err = load_text("[[detector.inputs]]\ntopic = \"x\"\nformat = \"syslog\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("format") && !err.contains('\n'), "{err}");

        #[cfg(feature = "simulator")]
        {
            let err = load_text("[sim]\nspeed = 0.0\n").unwrap_err().to_string();
            assert_eq!(err, "config: sim.speed: must be a positive number, got 0");

            let err = load_text("[sim]\nnodes = 2\njobs = 4\n")
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("config: sim.jobs: 4 jobs need"), "{err}");
        }

        // Keys without cluster or backend: a file the other services share.
        load_text("[executor.public_keys]\nk1 = \"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\"\n")
            .unwrap();
        let err = load_text("[executor.public_keys]\nk1 = \"abc\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("executor.public_keys.k1"), "{err}");

        let err = load_text("[executor.backend]\nkind = \"carrier-pigeon\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("executor.backend") && !err.contains('\n'),
            "{err}"
        );

        let err = jailed(|| Config::load(Some(Path::new("/nonexistent/unicron.toml"))))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "config: /nonexistent/unicron.toml: no such file");
    }
}

#[allow(clippy::result_large_err)] // figment::Jail's closure signature
mod env_tests {
    use crate::config::*;

    #[test]
    fn environment_overrides_file_and_names_bad_fields() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("u.toml", "[kafka]\nbrokers = \"file:1\"\n")?;
            jail.set_env("UNICRON_KAFKA__BROKERS", "env:2");
            jail.set_env("UNICRON_KAFKA__SASL__USERNAME", "svc");
            jail.set_env("UNICRON_LOG", "ignored: not a config section");
            let config = Config::load(Some(Path::new("u.toml"))).unwrap();
            assert_eq!(config.kafka.brokers.as_deref(), Some("env:2"));
            assert_eq!(
                config.kafka.librdkafka_properties(),
                vec![("sasl.username".to_string(), "svc".to_string())]
            );
            jail.set_env("UNICRON_METRICS__ENABLED", "maybe");
            let err = Config::load(Some(Path::new("u.toml")))
                .unwrap_err()
                .to_string();
            assert!(err.contains("metrics.enabled"), "{err}");
            Ok(())
        });
    }

    /// Every section of the file is reachable from the environment: one
    /// typed key of each, set to a value of the wrong type, is read and
    /// rejected with its name.
    #[test]
    fn the_environment_reaches_every_section() {
        let defaults = toml::Value::try_from(Config::default()).unwrap();
        let sections = Config::sections();
        assert!(sections.len() >= 12, "{sections:?}");
        for section in &sections {
            let path = typed_leaf(&defaults[section.as_str()], vec![section.clone()])
                .unwrap_or_else(|| panic!("[{section}] has no boolean or numeric key"));
            let var = format!("UNICRON_{}", path.join("__").to_ascii_uppercase());
            figment::Jail::expect_with(|jail| {
                jail.set_env(&var, "bogus");
                let err = Config::load(None).unwrap_err().to_string();
                assert!(err.contains(&path.join(".")), "{var}: {err}");
                Ok(())
            });
        }
    }

    /// The path of the first boolean or numeric value under `value`.
    fn typed_leaf(value: &toml::Value, path: Vec<String>) -> Option<Vec<String>> {
        match value {
            toml::Value::Boolean(_) | toml::Value::Integer(_) | toml::Value::Float(_) => Some(path),
            toml::Value::Table(table) => table.iter().find_map(|(key, value)| {
                let mut path = path.clone();
                path.push(key.clone());
                typed_leaf(value, path)
            }),
            _ => None,
        }
    }
}

mod example_tests {
    use crate::config::*;

    /// The shipped example documents the defaults; keep the two in step.
    #[test]
    fn example_config_loads_and_equals_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/unicron.toml");
        let loaded = super::sections::jailed(|| Config::load(Some(&path))).unwrap();
        assert_eq!(loaded, Config::default());
    }
}

/// Fuzzing the loader (docs/fuzzing.md): the default configuration with values
/// replaced by others of any type, keys removed or misspelt, and the text
/// then cut or spliced, loads or fails with one line naming the field (or
/// the line of a syntax error), never a panic. `PROPTEST_CASES=20000 cargo
/// test -p unicron --bin unicron config::fuzz_tests` is the long run.
#[allow(clippy::result_large_err)] // figment::Jail's closure signature
mod fuzz_tests {
    use crate::config::*;
    use proptest::prelude::*;

    /// Sections of the file, as errors name them.
    const SECTIONS: &[&str] = &[
        "kafka",
        "metrics",
        "embedded",
        "planner",
        "detector",
        "executor",
        "agent",
        "slurm",
        "kubernetes",
        #[cfg(feature = "simulator")]
        "sim",
        "archiver",
        "status",
        "remote_write",
    ];

    #[derive(Debug, Clone)]
    enum Edit {
        /// Replace the value at a path (chosen by index among all paths).
        Set(usize, toml::Value),
        /// Replace it with another of the same type: a number out of range,
        /// another string, the other boolean.
        Tweak(usize, i64, f64, String),
        Remove(usize),
        /// A key no section knows, in the section of a path.
        Unknown(usize, String),
    }

    fn value() -> impl Strategy<Value = toml::Value> {
        let scalar = prop_oneof![
            any::<i64>().prop_map(toml::Value::Integer),
            prop_oneof![Just(0i64), Just(-1), Just(1), Just(65_536), Just(i64::MAX)]
                .prop_map(toml::Value::Integer),
            any::<f64>().prop_map(toml::Value::Float),
            prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(0.0), Just(-1.5)]
                .prop_map(toml::Value::Float),
            any::<bool>().prop_map(toml::Value::Boolean),
            ".{0,16}".prop_map(toml::Value::String),
            prop_oneof![
                Just("0.0.0.0:0"),
                Just("k1:9092"),
                Just("10s"),
                Just("-5m"),
                Just("otlp_json"),
                Just("metrics"),
                Just("")
            ]
            .prop_map(|s| toml::Value::String(s.to_string())),
        ];
        scalar.prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(toml::Value::Array),
                proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                    .prop_map(|m| toml::Value::Table(m.into_iter().collect())),
            ]
        })
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let int = prop_oneof![
            Just(0i64),
            Just(-1),
            Just(1),
            Just(17),
            Just(i64::from(i32::MAX) + 1),
            Just(i64::MIN),
            any::<i64>()
        ];
        let float = prop_oneof![
            Just(0.0f64),
            Just(-1.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(1e300),
            Just(0.5),
            any::<f64>()
        ];
        let string = prop_oneof![
            Just(String::new()),
            Just("[::1]:99999".to_string()),
            Just("none".to_string()),
            ".{0,12}"
        ];
        prop_oneof![
            4 => (any::<usize>(), int, float, string).prop_map(|(at, i, f, s)| Edit::Tweak(at, i, f, s)),
            3 => (any::<usize>(), value()).prop_map(|(at, v)| Edit::Set(at, v)),
            1 => any::<usize>().prop_map(Edit::Remove),
            1 => (any::<usize>(), "[a-z_]{1,10}").prop_map(|(at, k)| Edit::Unknown(at, k)),
        ]
    }

    /// Every path to a value of `table`, depth first.
    fn paths(table: &toml::Table, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for (key, value) in table {
            let mut path = prefix.to_vec();
            path.push(key.clone());
            out.push(path.clone());
            if let toml::Value::Table(inner) = value {
                paths(inner, &path, out);
            }
        }
    }

    fn parent<'t>(table: &'t mut toml::Table, path: &[String]) -> Option<&'t mut toml::Table> {
        let mut at = table;
        for key in &path[..path.len() - 1] {
            at = at.get_mut(key)?.as_table_mut()?;
        }
        Some(at)
    }

    fn apply(table: &mut toml::Table, edit: &Edit) {
        let mut all = Vec::new();
        paths(table, &[], &mut all);
        if all.is_empty() {
            return;
        }
        let path = match edit {
            Edit::Set(at, _) | Edit::Tweak(at, ..) | Edit::Remove(at) | Edit::Unknown(at, _) => {
                &all[at % all.len()]
            }
        };
        let Some(parent) = parent(table, path) else {
            return;
        };
        let key = path.last().unwrap();
        match edit {
            Edit::Set(_, value) => {
                parent.insert(key.clone(), value.clone());
            }
            Edit::Tweak(_, int, float, string) => {
                let value = match parent.get(key) {
                    Some(toml::Value::Integer(_)) => toml::Value::Integer(*int),
                    Some(toml::Value::Float(_)) => toml::Value::Float(*float),
                    Some(toml::Value::String(_)) => toml::Value::String(string.clone()),
                    Some(toml::Value::Boolean(b)) => toml::Value::Boolean(!b),
                    _ => return,
                };
                parent.insert(key.clone(), value);
            }
            Edit::Remove(_) => {
                parent.remove(key);
            }
            Edit::Unknown(_, name) => {
                parent.insert(format!("{name}_x"), toml::Value::Integer(1));
            }
        }
    }

    fn check(text: &str) -> Result<(), TestCaseError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unicron.toml");
        std::fs::write(&path, text).unwrap();
        let loaded = super::sections::jailed(|| Config::load(Some(&path)));
        if let Err(e) = loaded {
            let message = e.to_string();
            prop_assert!(!message.contains('\n'), "{message}");
            prop_assert!(message.starts_with("config: "), "{message}");
            // Our checks start with the field's path; figment's name the
            // key (under its profile, `default.`); TOML's the line.
            let names_field = SECTIONS
                .iter()
                .any(|s| message.starts_with(&format!("config: {s}.")))
                || message.contains("for key \"default.")
                || message.starts_with("config: TOML parse error at line ");
            prop_assert!(names_field, "names no field: {message}");
        }
        Ok(())
    }

    fn cases(default: u32) -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default);
        ProptestConfig {
            cases,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(cases(192))]

        #[test]
        fn edited_configs_load_or_name_the_field(
            edits in proptest::collection::vec(edit(), 1..4),
            splice in proptest::option::of((any::<usize>(), prop_oneof![
                Just(""), Just("["), Just("]"), Just("="), Just("\""), Just("\n[kafka]\n"),
                Just("\u{0}"), Just("x = 1\n"),
            ])),
        ) {
            let mut table = toml::Table::try_from(Config::default()).unwrap();
            for e in &edits {
                apply(&mut table, e);
            }
            let mut text = toml::to_string(&table).unwrap();
            if let Some((at, with)) = splice {
                let mut at = at % (text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                if with.is_empty() {
                    text.truncate(at);
                } else {
                    text.insert_str(at, with);
                }
            }
            check(&text)?;
        }
    }
}
