//! The test cluster's certificates and kubeconfigs, made with the openssl
//! command line (no crate: the API server reads PEM files anyway).

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use super::{ControlPlaneError, fail};

pub(super) fn free_port() -> Result<u16, ControlPlaneError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| fail(format!("no free port: {e}")))
}

pub(super) fn openssl(dir: &Path, args: &[&str]) -> Result<(), ControlPlaneError> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| fail(format!("openssl: {e} (Debian's openssl package)")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// A certificate signed by the test CA: `name.key`, `name.crt`.
pub(super) fn signed(
    dir: &Path,
    name: &str,
    subject: &str,
    sans: Option<&str>,
) -> Result<(), ControlPlaneError> {
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    )?;
    let mut args = vec![
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        &crt,
        "-days",
        "2",
    ];
    let ext = dir.join(format!("{name}.ext"));
    if let Some(sans) = sans {
        std::fs::write(&ext, format!("subjectAltName={sans}\n"))
            .map_err(|e| fail(e.to_string()))?;
        args.extend(["-extfile", ext.to_str().unwrap_or_default()]);
    }
    openssl(dir, &args)
}

pub(super) fn kubeconfig(server: &str, ca: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
         users:\n- name: user\n  user:\n    {user}\n\
         contexts:\n- name: test\n  context:\n    cluster: test\n    user: user\n\
         current-context: test\n"
    )
}

/// API settings whose kubeconfig names an API server on a loopback port
/// nothing listens on (connections are refused), for tests of what
/// happens while the API server is away.
pub fn unreachable_api(dir: &Path) -> crate::client::ApiSettings {
    let port = free_port().expect("a free port");
    let path = dir.join("kubeconfig-unreachable");
    let config = kubeconfig(
        &format!("https://127.0.0.1:{port}"),
        "/dev/null",
        "token: unreachable",
    )
    .replace(
        "certificate-authority: /dev/null",
        "insecure-skip-tls-verify: true",
    );
    std::fs::write(&path, config).expect("write the kubeconfig");
    crate::client::ApiSettings {
        kubeconfig: Some(path),
        timeout_s: 2.0,
        ..Default::default()
    }
}
