//! TLS between the nodes, with mutual authentication (docs/cluster.md "TLS between nodes", docs/security.md
//! "The cluster's internal port"). A node proves it is a node by a certificate that chains to one of the
//! cluster's CAs and names [`NODE_NAME`]; it serves the internal port only to clients that present such a
//! certificate, and connects only to peers that present one. The name is fixed, not the host a lease row
//! publishes: a lease row is written by whoever holds the database, so trusting its `host:port` for identity
//! would let the database name the peer; the cluster's CA decides who is a node, the row only where it is.
//!
//! Both sides check both things: the chain to a CA of the bundle (each side with rustls' WebPKI verifier) and
//! the name (the server's as the client connects, the client's by the same server verifier run on its chain),
//! so a node certificate carries both extended key usages, serverAuth and clientAuth.
//!
//! Rotation without downtime: the CA file may hold several CAs, all accepted at once, and [`ClusterTls::reload`]
//! (on SIGHUP) re-reads the CA bundle and this node's certificate and key; handshakes after it use them, the
//! connections already open keep theirs. Swap in a bundle with old and new CA on every node and reload, then
//! new node certificates and reload, then a bundle with the new CA only and reload.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use veil_http::{CertFiles, ReloadingCert, TlsError};

/// The name every node certificate carries (a DNS subject alternative name) and every node verifies.
pub const NODE_NAME: &str = "veil-cluster-node";
/// HTTP/2 is all the internal RPC speaks.
const ALPN_H2: &[u8] = b"h2";

/// Where a node's TLS material is: the cluster's CA bundle (one or more CAs, PEM) and this node's certificate
/// chain (leaf first) and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: CertFiles,
}

/// The verifiers of the CA bundle in force.
struct Verifiers {
    client: Arc<dyn ClientCertVerifier>,
    server: Arc<dyn ServerCertVerifier>,
}

/// A node's TLS: its certificate (reloaded like the public listeners') and the CA bundle it verifies peers
/// against (reloaded with it).
pub struct ClusterTls {
    ca: PathBuf,
    cert: Arc<ReloadingCert>,
    verifiers: ArcSwap<Verifiers>,
}

impl fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterTls")
            .field("ca", &self.ca)
            .field("cert", &self.cert.files())
            .finish_non_exhaustive()
    }
}

impl ClusterTls {
    /// Reads the files; fails when any cannot be read, the key does not fit the certificate, or the CA file
    /// holds no usable CA.
    pub fn load(files: &TlsFiles) -> Result<Arc<Self>, TlsError> {
        let cert = Arc::new(ReloadingCert::load(files.cert.clone())?);
        let verifiers = verifiers(&files.ca, &cert)?;
        Ok(Arc::new(Self {
            ca: files.ca.clone(),
            cert,
            verifiers: ArcSwap::from_pointee(verifiers),
        }))
    }

    /// Re-reads the CA bundle and this node's certificate and key; on any error what is in force stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let verifiers = verifiers(&self.ca, &self.cert)?;
        self.cert.reload()?;
        self.verifiers.store(Arc::new(verifiers));
        Ok(())
    }

    pub fn ca_file(&self) -> &std::path::Path {
        &self.ca
    }

    /// The internal port's configuration: TLS only, a client certificate required and verified.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(self.cert.provider().clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Config(error.to_string()))?
            .with_client_cert_verifier(Arc::new(NodeClients(self.clone())))
            .with_cert_resolver(Arc::new(NodeCert(self.clone())));
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Ok(Arc::new(config))
    }

    /// The configuration a node connects to its peers with: it presents its certificate and accepts only a
    /// peer's that chains to the cluster's CA and names [`NODE_NAME`].
    pub fn client_config(self: &Arc<Self>) -> Result<Arc<ClientConfig>, TlsError> {
        let mut config = ClientConfig::builder_with_provider(self.cert.provider().clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Config(error.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NodeServers(self.clone())))
            .with_client_cert_resolver(Arc::new(NodeCert(self.clone())));
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Ok(Arc::new(config))
    }
}

/// The verifiers of the CAs in `ca`; fails on a file without a CA rustls accepts as a trust anchor.
fn verifiers(ca: &std::path::Path, cert: &ReloadingCert) -> Result<Verifiers, TlsError> {
    let mut roots = RootCertStore::empty();
    for der in veil_http::tls::read_chain(ca)? {
        roots.add(der).map_err(|error| TlsError::Cert {
            path: ca.into(),
            reason: format!("not a usable CA certificate: {error}"),
        })?;
    }
    let roots = Arc::new(roots);
    let provider = cert.provider().clone();
    let config = |error: rustls::server::VerifierBuilderError| TlsError::Config(error.to_string());
    let client = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(config)?;
    let server = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
        .build()
        .map_err(config)?;
    Ok(Verifiers { client, server })
}

fn node_name() -> ServerName<'static> {
    ServerName::try_from(NODE_NAME).unwrap_or_else(|_| unreachable!("a valid DNS name"))
}

/// This node's certificate, for both ends of a connection.
#[derive(Debug)]
struct NodeCert(Arc<ClusterTls>);

impl ResolvesServerCert for NodeCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.cert.current())
    }
}

impl ResolvesClientCert for NodeCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.cert.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The internal port's check of a client: its chain to a CA of the bundle in force (clientAuth), and the
/// node name (the server verifier on the same chain, which also wants serverAuth: a node certificate
/// serves both ends).
#[derive(Debug)]
struct NodeClients(Arc<ClusterTls>);

impl ClientCertVerifier for NodeClients {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The hints would have to borrow from the bundle in force, which a reload replaces; a node presents
        // its one certificate whatever the hints.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verifiers = self.0.verifiers.load();
        let verified = verifiers
            .client
            .verify_client_cert(end_entity, intermediates, now)?;
        verifiers
            .server
            .verify_server_cert(end_entity, intermediates, &node_name(), &[], now)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .verifiers
            .load()
            .client
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .verifiers
            .load()
            .client
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.verifiers.load().client.supported_verify_schemes()
    }
}

/// A client's check of the node it connects to: its chain to a CA of the bundle in force and the node
/// name, whatever host the lease row published.
#[derive(Debug)]
struct NodeServers(Arc<ClusterTls>);

impl ServerCertVerifier for NodeServers {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.verifiers.load().server.verify_server_cert(
            end_entity,
            intermediates,
            &node_name(),
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .verifiers
            .load()
            .server
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .verifiers
            .load()
            .server
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.verifiers.load().server.supported_verify_schemes()
    }
}

/// tonic's connector to a peer over TLS: TCP to the URI's `host:port` (Nagle off: a call is one small write
/// each way), then the handshake as [`ClusterTls::client_config`] says. tonic bounds the whole of it with the
/// endpoint's connect timeout.
#[derive(Clone)]
pub struct Connector {
    tls: TlsConnector,
}

impl Connector {
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self {
            tls: TlsConnector::from(config),
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<tonic::transport::Uri> for Connector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: tonic::transport::Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("the peer's address has no host")?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().ok_or("the peer's address has no port")?;
            let tcp = TcpStream::connect((host, port)).await?;
            tcp.set_nodelay(true)?;
            // The name is the verifier's to decide (always NODE_NAME); SNI carries it too.
            let stream = tls.connect(node_name(), tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
