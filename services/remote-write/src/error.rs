use unicron_bus::BusError;

/// Why the receiver could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RemoteWriteError {
    /// A setting that cannot work; names the field.
    #[error("{field}: {reason}")]
    Setting { field: &'static str, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// A token setting that cannot work; names the field.
    #[error(transparent)]
    Access(#[from] unicron_access::AccessError),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("serving HTTP: {0}")]
    Serve(std::io::Error),
}
