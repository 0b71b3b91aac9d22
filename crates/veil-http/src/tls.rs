//! TLS of the listeners (docs/security.md "TLS"): rustls with the ring provider, the certificate and key read
//! from PEM files and swapped atomically on reload (SIGHUP), so that handshakes in progress and open
//! connections keep the certificate they started with while new handshakes get the new one.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// ALPN protocols of an HTTP listener: HTTP/2 preferred, HTTP/1.1 for the clients that only speak it.
pub const ALPN_HTTP: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN protocols of a gRPC listener: gRPC is HTTP/2 only.
pub const ALPN_GRPC: &[&[u8]] = &[b"h2"];

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate chain {path}: {reason}")]
    Cert { path: PathBuf, reason: String },
    #[error("no certificate in {path}")]
    NoCert { path: PathBuf },
    #[error("cannot read the private key {path}: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("the key {key} does not fit the certificate {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Where a listener's certificate chain (leaf first) and private key are, both PEM.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The certificate in force for one pair of files, re-read by [`ReloadingCert::reload`].
pub struct ReloadingCert {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<CertifiedKey>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    /// Reads the files; fails when either cannot be read or the key does not belong to the certificate.
    pub fn load(files: CertFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = load_certified_key(&files, &provider)?;
        Ok(Self {
            files,
            provider,
            current: ArcSwap::from_pointee(key),
        })
    }

    pub fn files(&self) -> &CertFiles {
        &self.files
    }

    /// Re-reads the files and puts their certificate in force for the next handshakes. On any error the
    /// certificate in force stays as it was.
    pub fn reload(&self) -> Result<(), TlsError> {
        let key = load_certified_key(&self.files, &self.provider)?;
        self.current.store(Arc::new(key));
        Ok(())
    }

    /// The certificate in force now (the cluster's nodes present it as clients too).
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// The crypto provider the certificate was loaded with.
    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }

    /// The rustls server configuration of a listener serving this certificate with `alpn`.
    pub fn server_config(self: &Arc<Self>, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Config(error.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

fn load_certified_key(
    files: &CertFiles,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = read_chain(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|error| TlsError::Key {
        path: files.key.clone(),
        reason: error.to_string(),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|error| TlsError::Mismatch {
        cert: files.cert.clone(),
        key: files.key.clone(),
        reason: error.to_string(),
    })
}

/// Every certificate of a PEM file, in order; fails on none.
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let cert_error = |error: rustls_pki_types::pem::Error| TlsError::Cert {
        path: path.into(),
        reason: error.to_string(),
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(cert_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(cert_error)?;
    if chain.is_empty() {
        return Err(TlsError::NoCert { path: path.into() });
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_cert(dir: &Path, name: &str) -> CertFiles {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("rcgen");
        let files = CertFiles {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}-key.pem")),
        };
        std::fs::write(&files.cert, cert.cert.pem()).expect("write");
        std::fs::write(&files.key, cert.key_pair.serialize_pem()).expect("write");
        files
    }

    fn served(cert: &ReloadingCert) -> Vec<u8> {
        cert.current.load().cert[0].to_vec()
    }

    #[test]
    fn a_reload_puts_the_new_certificate_in_force() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = write_cert(dir.path(), "a");
        let cert = ReloadingCert::load(files.clone()).expect("load");
        let before = served(&cert);
        let other = write_cert(dir.path(), "b");
        std::fs::copy(&other.cert, &files.cert).expect("copy");
        std::fs::copy(&other.key, &files.key).expect("copy");
        cert.reload().expect("reload");
        assert_ne!(served(&cert), before);
    }

    #[test]
    fn a_bad_file_on_reload_keeps_the_old_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = write_cert(dir.path(), "a");
        let cert = ReloadingCert::load(files.clone()).expect("load");
        let before = served(&cert);
        std::fs::write(&files.cert, "not a certificate").expect("write");
        assert!(cert.reload().is_err());
        assert_eq!(served(&cert), before);
        // A key of another certificate is refused too.
        let b = write_cert(dir.path(), "b");
        let c = write_cert(dir.path(), "c");
        let mismatched = ReloadingCert::load(CertFiles {
            cert: b.cert,
            key: c.key,
        });
        assert!(matches!(mismatched, Err(TlsError::Mismatch { .. })));
        assert_eq!(served(&cert), before);
    }
}
