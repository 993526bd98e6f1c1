//! The listener's files and the rustls server config made from them.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `--tls-cert`, `--tls-key` and, optionally, `--agent-ca`.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM: the server's certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM: the CA that signs agents' client certificates.
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {what}")]
    File { path: PathBuf, what: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_error(path: &Path, what: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        what: what.to_string(),
    }
}

/// Every certificate of a PEM file (at least one).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// What verifies agents' client certificates (`--agent-ca`).
pub type ClientVerifier = Arc<dyn rustls::server::danger::ClientCertVerifier>;

impl TlsFiles {
    /// The verifier of client certificates against `--agent-ca` (optional
    /// at the TLS layer); `None` without one.
    pub fn client_verifier(&self) -> Result<Option<ClientVerifier>, TlsError> {
        let Some(ca) = &self.client_ca else {
            return Ok(None);
        };
        let mut roots = RootCertStore::empty();
        for cert in read_certs(ca)? {
            roots.add(cert).map_err(|e| file_error(ca, e))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| file_error(ca, e))?;
        Ok(Some(verifier))
    }

    /// The server config: h2 only, TLS 1.2 and 1.3, client certificates
    /// checked by `verifier` when there is one (and optional).
    pub fn server_config(
        &self,
        verifier: Option<ClientVerifier>,
    ) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let certs = read_certs(&self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| file_error(&self.key, e))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match verifier {
            None => builder.with_no_client_auth(),
            Some(verifier) => builder.with_client_cert_verifier(verifier),
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            file_error(
                &self.key,
                format!("does not fit {}: {e}", self.cert.display()),
            )
        })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}
