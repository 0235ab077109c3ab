//! `unicron acls`: the Kafka ACLs each unicron principal needs, and no
//! more, as `kafka-acls.sh` lines (docs/operations.md, "Tenants").
//!
//! One table says what every service reads and writes. The shared
//! services (ingress, detector, planner, archiver, remote-write) get their
//! topics by name; each cluster's writers (agent, executor, watcher) get
//! that cluster's own topic and nothing of another cluster's, which is what keeps one cluster from speaking for another
//! (with `kafka.cluster_topics`). Commands are one shared topic: every
//! agent and executor may read all clusters' (they are signed, and each
//! acts only on its own cluster's); documented as such.

use std::collections::BTreeMap;

use anyhow::bail;
use clap::Args;
use unicron_bus::whole_topic::READER_GROUP;
use unicron_codec::{Topic, Topics, check_cluster_id};

use crate::config::Config;

#[derive(Debug, Args)]
pub struct AclsArgs {
    /// A cluster whose agents, executor and watcher get principals of
    /// their own (repeat for several).
    #[arg(long = "cluster", value_name = "ID")]
    pub clusters: Vec<String>,
    /// A principal other than the default for a role: `ROLE=User:NAME`.
    /// Roles: ingress detector planner archiver remote-write, and per
    /// cluster agent-C executor-C watcher-C. Default: `User:unicron-ROLE`.
    #[arg(long = "principal", value_name = "ROLE=PRINCIPAL")]
    pub principals: Vec<String>,
}

/// What one principal may do to one kind of resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub principal: String,
    pub operations: Vec<&'static str>,
    /// `topic` or `group`.
    pub resource: &'static str,
    /// `literal` or `prefixed`.
    pub pattern: &'static str,
    pub names: Vec<String>,
}

/// One `kafka-acls.sh` invocation per resource set, with every principal
/// granted the same on it (its admin connection left to the variables
/// `BOOTSTRAP` and `ADMIN_CONFIG`), in the order of first appearance.
pub fn lines(grants: &[Grant]) -> Vec<String> {
    let mut merged: Vec<(Vec<&str>, &Grant)> = Vec::new();
    for grant in grants {
        let same = |g: &&Grant| {
            (g.operations == grant.operations)
                && g.resource == grant.resource
                && g.pattern == grant.pattern
                && g.names == grant.names
        };
        match merged.iter_mut().find(|(_, g)| same(g)) {
            Some((principals, _)) => principals.push(&grant.principal),
            None => merged.push((vec![&grant.principal], grant)),
        }
    }
    merged
        .into_iter()
        .map(|(principals, grant)| grant.line(&principals))
        .collect()
}

impl Grant {
    fn line(&self, principals: &[&str]) -> String {
        let mut line = String::from(
            "kafka-acls.sh --bootstrap-server \"$BOOTSTRAP\" --command-config \"$ADMIN_CONFIG\" --add",
        );
        for principal in principals {
            line.push_str(&format!(" --allow-principal {principal}"));
        }
        for operation in &self.operations {
            line.push_str(&format!(" --operation {operation}"));
        }
        for name in &self.names {
            line.push_str(&format!(" --{} {name}", self.resource));
        }
        line.push_str(&format!(" --resource-pattern-type {}", self.pattern));
        line
    }
}

/// Every grant, in a fixed order: the shared services, then each cluster's.
pub fn grants(
    config: &Config,
    clusters: &[String],
    principals: &BTreeMap<String, String>,
) -> Vec<Grant> {
    let topics = Topics::new(&config.kafka);
    let name = |t: Topic| topics.name(t).to_string();
    let names = |ts: &[Topic]| ts.iter().map(|t| name(*t)).collect::<Vec<_>>();
    let principal = |role: &str| {
        principals
            .get(role)
            .cloned()
            .unwrap_or_else(|| format!("User:unicron-{role}"))
    };
    let grant =
        |role: &str, operations: &[&'static str], resource, pattern, names: Vec<String>| Grant {
            principal: principal(role),
            operations: operations.to_vec(),
            resource,
            pattern,
            names,
        };
    let read = &["Read"][..];
    let write = &["Write"][..];
    let detector_inputs = [Topic::Telemetry, Topic::Logs, Topic::Agent];
    let mut detector_reads = names(&detector_inputs);
    detector_reads.extend(config.detector.inputs.iter().map(|i| i.topic.clone()));
    let mut out = vec![
        grant(
            "ingress",
            read,
            "topic",
            "prefixed",
            vec![topics.ingress_prefix()],
        ),
        grant(
            "ingress",
            read,
            "group",
            "literal",
            vec![config.ingress.group_id.clone()],
        ),
        grant("ingress", write, "topic", "literal", {
            let mut t = names(&Topic::INGRESS);
            t.push(name(Topic::Dlq));
            t
        }),
        grant("detector", read, "topic", "literal", detector_reads),
        grant(
            "detector",
            read,
            "group",
            "literal",
            vec![config.detector.group_id.clone(), READER_GROUP.into()],
        ),
        grant(
            "detector",
            write,
            "topic",
            "literal",
            names(&[Topic::Failures, Topic::DetectorRounds, Topic::Dlq]),
        ),
        // The planner's inputs and its own checkpoints and decisions (a
        // takeover reads them), and what its status page follows and an
        // explain cites (the detector's inputs).
        grant(
            "planner",
            read,
            "topic",
            "literal",
            names(&[
                Topic::Failures,
                Topic::Cluster,
                Topic::CommandResults,
                Topic::Decisions,
                Topic::Commands,
                Topic::PlannerCheckpoints,
                Topic::DetectorRounds,
                Topic::Telemetry,
                Topic::Logs,
                Topic::Agent,
            ]),
        ),
        grant(
            "planner",
            read,
            "group",
            "literal",
            vec![
                config.planner.group_id.clone(),
                STATUS_READER.into(),
                READER_GROUP.into(),
            ],
        ),
        grant(
            "planner",
            write,
            "topic",
            "literal",
            names(&[
                Topic::Decisions,
                Topic::Commands,
                Topic::PlannerCheckpoints,
                Topic::Dlq,
            ]),
        ),
        grant(
            "archiver",
            read,
            "topic",
            "literal",
            config.archiver.topics(&config.kafka).into_keys().collect(),
        ),
        grant(
            "archiver",
            read,
            "group",
            "literal",
            vec![config.archiver.group_id.clone()],
        ),
        // What it cannot decode it dead-letters.
        grant("archiver", write, "topic", "literal", names(&[Topic::Dlq])),
        grant(
            "remote-write",
            write,
            "topic",
            "literal",
            names(&[Topic::Telemetry, Topic::Dlq]),
        ),
    ];
    for cluster in clusters {
        // Literal, not prefixed: the prefix `in.a` would match cluster
        // `ab`'s topic too.
        let own = topics.ingress_name(cluster);
        for role in ["agent", "executor", "watcher"] {
            let role = format!("{role}-{cluster}");
            out.push(grant(
                &role,
                &["Write", "Create"],
                "topic",
                "literal",
                vec![own.clone()],
            ));
        }
        for role in ["agent", "executor"] {
            let role_c = format!("{role}-{cluster}");
            out.push(grant(
                &role_c,
                read,
                "topic",
                "literal",
                names(&[Topic::Commands]),
            ));
            out.push(grant(
                &role_c,
                write,
                "topic",
                "literal",
                names(&[Topic::Dlq]),
            ));
        }
        // An agent's group is `unicron-agent.<cluster>.<node>`, one per node.
        out.push(grant(
            &format!("agent-{cluster}"),
            read,
            "group",
            "prefixed",
            vec![format!("unicron-agent.{cluster}.")],
        ));
        let group = if config.executor.cluster == *cluster {
            config.executor.group()
        } else {
            format!("unicron-executor.{cluster}")
        };
        out.push(grant(
            &format!("executor-{cluster}"),
            read,
            "group",
            "literal",
            vec![group],
        ));
    }
    out
}

/// The group id the status page's reader carries (it joins no group).
const STATUS_READER: &str = "unicron-status";

/// Prints the lines.
pub fn run(config: &Config, args: &AclsArgs) -> anyhow::Result<()> {
    if !config.kafka.cluster_topics {
        bail!(
            "kafka.cluster_topics: must be true; without clusters' own topics every cluster's writers share the topics and no ACL can tell them apart"
        );
    }
    for cluster in &args.clusters {
        if let Err(why) = check_cluster_id(cluster) {
            bail!("--cluster: {why}");
        }
    }
    let mut principals = BTreeMap::new();
    for given in &args.principals {
        let Some((role, principal)) = given.split_once('=') else {
            bail!("--principal: {given:?} is not ROLE=PRINCIPAL");
        };
        if !principal.contains(':') {
            bail!("--principal: {principal:?} is not TYPE:NAME (User:alice)");
        }
        principals.insert(role.to_string(), principal.to_string());
    }
    println!(
        "# Kafka ACLs for unicron; set BOOTSTRAP and ADMIN_CONFIG (an admin's client properties)."
    );
    for line in lines(&grants(config, &args.clusters, &principals)) {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let mut config = Config::default();
        config.kafka.cluster_topics = true;
        config
    }

    #[test]
    fn a_clusters_writers_get_its_prefix_and_nothing_of_anothers() {
        let grants = grants(&config(), &["a".into(), "b".into()], &BTreeMap::new());
        let of = |p: &str| {
            grants
                .iter()
                .filter(|g| g.principal == p)
                .collect::<Vec<_>>()
        };
        for role in ["agent-a", "executor-a", "watcher-a"] {
            let mine = of(&format!("User:unicron-{role}"));
            assert!(!mine.is_empty(), "{role}");
            for g in &mine {
                for name in &g.names {
                    assert!(!name.starts_with("unicron.in.b"), "{role}: {name}");
                    if g.operations.contains(&"Write") {
                        assert!(
                            (name == "unicron.in.a" && g.pattern == "literal")
                                || name == "unicron.dlq",
                            "{role} writes {name}"
                        );
                    }
                }
            }
        }
        let ingress = of("User:unicron-ingress");
        assert!(
            ingress
                .iter()
                .any(|g| g.pattern == "prefixed" && g.names == ["unicron.in."])
        );
    }

    #[test]
    fn lines_are_kafka_acls_invocations() {
        let grants = grants(
            &config(),
            &["a".into()],
            &BTreeMap::from([("detector".to_string(), "User:det".to_string())]),
        );
        let lines = lines(&grants);
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with("kafka-acls.sh --bootstrap-server \"$BOOTSTRAP\""))
        );
        assert!(
            lines.iter().any(|l| l.ends_with("--add --allow-principal User:det --operation Write --topic unicron.failures --topic unicron.detector-rounds --topic unicron.dlq --resource-pattern-type literal")),
            "{lines:#?}"
        );
        // A cluster's three writers share one line for its prefix.
        assert!(lines.iter().any(|l| l.contains("--allow-principal User:unicron-agent-a --allow-principal User:unicron-executor-a --allow-principal User:unicron-watcher-a --operation Write --operation Create --topic unicron.in.a --resource-pattern-type literal")), "{lines:#?}");
    }
}
