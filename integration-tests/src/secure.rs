//! What the security tests bring to a [`crate::Cluster`] secured with
//! [`crate::cluster::Security`]: certificates made by the real `openssl`,
//! and requests that present a token.

use std::path::{Path, PathBuf};
use std::process::Command;
use tonic::metadata::MetadataValue;

/// Runs `openssl` with `args` in `dir`, panicking with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("running openssl");
    assert!(
        output.status.success(),
        "openssl {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A certificate authority in a directory, and the certificates it signs.
pub struct Pki {
    dir: PathBuf,
    /// The CA's name: file names start with it.
    pub name: String,
}

/// A certificate and its key.
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    /// A new self-signed CA `name` (files `<name>-ca.pem`, `<name>-ca.key`).
    pub fn new(dir: &Path, name: &str) -> Pki {
        std::fs::create_dir_all(dir).expect("pki dir");
        let (cert, key) = (format!("{name}-ca.pem"), format!("{name}-ca.key"));
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &cert,
                "-days",
                "2",
                "-subj",
                &format!("/CN={name} test CA"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        Pki {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        }
    }

    /// The CA certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A leaf certificate `file` signed by this CA for `cn` with the
    /// subject alternative names `san` (e.g. `IP:127.0.0.1,DNS:agent-0`).
    pub fn issue(&self, file: &str, cn: &str, san: &str) -> CertPair {
        let (key, csr, cert, ext) = (
            format!("{file}.key"),
            format!("{file}.csr"),
            format!("{file}.pem"),
            format!("{file}.ext"),
        );
        std::fs::write(
            self.dir.join(&ext),
            format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n"),
        )
        .expect("writing the extensions");
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &format!("{}-ca.pem", self.name),
                "-CAkey",
                &format!("{}-ca.key", self.name),
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
        CertPair {
            cert: self.dir.join(cert),
            key: self.dir.join(key),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self, file: &str) -> CertPair {
        self.issue(file, "127.0.0.1", "IP:127.0.0.1,DNS:localhost")
    }

    /// An agent's client certificate: its identity is `name`.
    pub fn agent(&self, file: &str, name: &str) -> CertPair {
        self.issue(file, name, &format!("DNS:{name}"))
    }
}

/// `message` as a request carrying `authorization: Bearer <token>`.
pub fn authed<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let value: MetadataValue<_> = format!("Bearer {token}").parse().expect("an ASCII token");
    request.metadata_mut().insert("authorization", value);
    request
}
