//! The shape of a test Kafka cluster ([`super::kafka::KafkaCluster`]).

use std::path::PathBuf;

/// Clients authenticate with SASL/SCRAM-SHA-512 over TLS.
#[derive(Debug, Clone)]
pub struct SaslSsl {
    /// A PEM file with the private key (PKCS#8, unencrypted) and the
    /// certificate chain the brokers present.
    pub keystore_pem: PathBuf,
    pub user: String,
    pub password: String,
    /// More SCRAM users: (name, password).
    pub more_users: Vec<(String, String)>,
    /// Run Kafka's KRaft `StandardAuthorizer`: `user` (and the brokers'
    /// own plaintext listeners) may do anything, everyone else only what
    /// an ACL allows.
    pub authorizer: bool,
}

/// The shape of a test cluster.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    pub brokers: usize,
    /// The clients' listener; unset: plaintext.
    pub sasl_ssl: Option<SaslSsl>,
    /// Each JVM's heap.
    pub heap_mb: u32,
    /// The address every listener binds and advertises: loopback, or an
    /// address other network namespaces reach.
    pub host: std::net::IpAddr,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        KafkaOptions {
            brokers: 3,
            sasl_ssl: None,
            heap_mb: 768,
            host: std::net::Ipv4Addr::LOCALHOST.into(),
        }
    }
}
