//! The name a certificate speaks for: its first DNS subject alternative
//! name, else its subject's common name (as Kubernetes and most mTLS
//! setups read it).

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The identity a client certificate carries (its DNS SAN, else its CN),
/// put into the request's extensions by the TLS listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity(pub String);

/// The identity of a DER certificate; `None` when it has neither a DNS SAN
/// nor a CN (or does not parse).
pub fn identity_of(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(cert.as_ref()).ok()?;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let dns = san.value.general_names.iter().find_map(|n| match n {
            GeneralName::DNSName(name) => Some(name.to_string()),
            _ => None,
        });
        if dns.is_some() {
            return dns;
        }
    }
    first_cn(cert.subject())
}

/// A distinguished name's first common name.
fn first_cn(name: &x509_parser::x509::X509Name<'_>) -> Option<String> {
    name.iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string)
}

/// The common name of the CA that issued a DER certificate (its issuer's
/// CN); `None` when it has none (or does not parse).
pub fn issuer_of(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(cert.as_ref()).ok()?;
    first_cn(cert.issuer())
}
