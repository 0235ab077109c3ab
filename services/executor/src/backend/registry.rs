//! Every executor backend, one line each: its `kind` in
//! `[executor.backend]` and its settings' type. Adding a backend is its
//! module (settings implementing [`BackendKind`], a backend implementing
//! [`ActionBackend`](super::ActionBackend)) and one line here
//! (docs/extending.md).

use serde::{Deserialize, Serialize};

use super::{BackendKind, exec, http, kubernetes, slurm};
use crate::error::ExecutorError;

macro_rules! backends {
    ($($variant:ident = $kind:literal => $settings:ty,)*) => {
        /// How the executor carries out an action: the `[executor.backend]`
        /// table, whose `kind` names the backend and whose other keys are
        /// that backend's settings.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind")]
        pub enum BackendSettings {
            $(
                #[doc = concat!("`kind = \"", $kind, "\"`")]
                #[serde(rename = $kind)]
                $variant($settings),
            )*
        }

        impl BackendSettings {
            /// Every `kind`, in the registry's order.
            pub const KINDS: &[&str] = &[$($kind),*];

            pub(crate) fn kind(&self) -> &dyn BackendKind {
                match self {
                    $(BackendSettings::$variant(settings) => settings,)*
                }
            }
        }
    };
}

backends! {
    Http = "http" => http::HttpSettings,
    Exec = "exec" => exec::ExecSettings,
    Simulator = "simulator" => http::SimulatorSettings,
    Slurm = "slurm" => slurm::SlurmSettings,
    Kubernetes = "kubernetes" => kubernetes::KubernetesSettings,
}

impl BackendSettings {
    /// The first setting that makes no sense, named as
    /// `executor.backend.FIELD`.
    pub fn validate(&self) -> Result<(), ExecutorError> {
        self.kind().validate()
    }

    /// The backend in a few words, for a startup line.
    pub fn describe(&self) -> String {
        self.kind().describe()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::BackendSettings;

    fn repo_file(path: &str) -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn every_kind_parses_by_its_name_and_has_its_docs() {
        let docs = repo_file("docs/executor.md");
        for kind in BackendSettings::KINDS {
            assert!(
                docs.contains(&format!("kind = \"{kind}\"")),
                "docs/executor.md says nothing of kind = \"{kind}\""
            );
            // Every kind is a table of its own: a wrong key is refused.
            let table = format!("kind = \"{kind}\"\nno_such_key = 1");
            let error = toml::from_str::<BackendSettings>(&table).unwrap_err();
            assert!(error.to_string().contains("no_such_key"), "{kind}: {error}");
        }
        let unknown = toml::from_str::<BackendSettings>("kind = \"nomad\"").unwrap_err();
        assert!(unknown.to_string().contains("nomad"), "{unknown}");
    }
}
