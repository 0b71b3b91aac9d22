//! The CLI's HTTP client for the admin API: JSON in, JSON out, and the API's error body
//! (`{"error":{"code","message"}}`) decoded into `CliError::Api` so the exit code can follow the code.
//! Blocking (ureq): a command makes a few requests in a row and needs no async runtime. An `https://`
//! endpoint is verified against the system's roots, or only against `--ca-file`'s certificates when given
//! (as curl's `--cacert` does), with rustls and the same ring provider the server uses.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{CliError, QueueArg};

/// A connect that takes longer than this means the endpoint is not there (exit 3) rather than slow.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Above the longest request the API serves: a receive's 20 s long poll.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);
/// A browse page holds up to 1000 messages of up to the queue's size limit each: well above ureq's 10 MB
/// default.
const ANSWER_BYTES_MAX: u64 = 1 << 30;
/// A probe answers a word (`ok`, `ready`, `starting`): anything longer is not Veil's probe.
const PROBE_ANSWER_BYTES_MAX: u64 = 4096;

/// Everything but unreserved characters is escaped in a path segment, so a name with `/`, `?` or `%` still
/// names one segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// One admin endpoint.
pub struct Client {
    agent: ureq::Agent,
    endpoint: String,
    /// `Authorization: Bearer <token>` for a server with an admin token.
    authorization: Option<String>,
}

impl Client {
    /// `endpoint` is an http(s) URL without a trailing `/` (checked by the argument parser). `ca_file` is a
    /// PEM file of the certificates to trust instead of the system's roots; read only for `https://`.
    pub fn new(
        endpoint: &str,
        token: Option<&str>,
        ca_file: Option<&Path>,
    ) -> Result<Self, CliError> {
        let mut config = ureq::Agent::config_builder()
            // Error answers carry the API's JSON error body: read it rather than get a bare status.
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(REQUEST_TIMEOUT));
        if endpoint.starts_with("https://") {
            config = config.tls_config(tls_config(ca_file)?);
        }
        Ok(Self {
            agent: config.build().into(),
            endpoint: endpoint.to_owned(),
            authorization: token
                .filter(|t| !t.is_empty())
                .map(|t| format!("Bearer {t}")),
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, CliError> {
        let mut request = self.agent.get(self.url(path));
        if let Some(authorization) = &self.authorization {
            request = request.header("Authorization", authorization);
        }
        for (key, value) in query {
            request = request.query(*key, value);
        }
        self.answer(request.call())
    }

    pub fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        let mut request = self
            .agent
            .post(self.url(path))
            .content_type("application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header("Authorization", authorization);
        }
        self.answer(request.send(body.to_string()))
    }

    pub fn delete(&self, path: &str) -> Result<Value, CliError> {
        let mut request = self.agent.delete(self.url(path));
        if let Some(authorization) = &self.authorization {
            request = request.header("Authorization", authorization);
        }
        self.answer(request.call())
    }

    /// A probe (`/healthz`, `/readyz`): its status and text, whatever the status. Probes need no token.
    pub fn probe(&self, path: &str) -> Result<(u16, String), CliError> {
        let sent = self.agent.get(format!("{}{path}", self.endpoint)).call();
        let (status, text) = self.read(sent, PROBE_ANSWER_BYTES_MAX)?;
        Ok((status.as_u16(), text))
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.endpoint)
    }

    /// The answer's JSON on a 2xx, else the API's error. The admin API answers JSON, errors included: an
    /// answer of another type comes from something else (a protocol port, a proxy's page).
    fn answer(
        &self,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, CliError> {
        let sent = sent.map_err(|error| self.transport_error(error))?;
        let content_type = sent
            .headers()
            .get(ureq::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let (status, text) = self.read(Ok(sent), ANSWER_BYTES_MAX)?;
        if !is_json(&content_type) {
            return Err(CliError::NotAdmin {
                endpoint: self.endpoint.clone(),
                // The status and type only: a protocol's error document is no help to the CLI's user.
                answer: format!(
                    "HTTP {} {}",
                    status.as_u16(),
                    if content_type.is_empty() {
                        "without a content type".to_owned()
                    } else {
                        format!("with {content_type}")
                    },
                ),
            });
        }
        if status.is_success() {
            return serde_json::from_str(&text)
                .map_err(|error| CliError::BadAnswer(format!("{error} in {}", excerpt(&text))));
        }
        Err(decode_error(status.as_u16(), &text))
    }

    /// The status and text of an answer of at most `limit` bytes.
    fn read(
        &self,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        limit: u64,
    ) -> Result<(ureq::http::StatusCode, String), CliError> {
        let mut response = sent.map_err(|error| self.transport_error(error))?;
        let text = response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_string()
            .map_err(|error| self.transport_error(error))?;
        Ok((response.status(), text))
    }

    fn transport_error(&self, error: ureq::Error) -> CliError {
        // ureq's words for an answer that is not HTTP/1.1, over a plain connection.
        let misread = self.endpoint.starts_with("http://")
            && matches!(error, ureq::Error::Protocol(_) | ureq::Error::Http(_));
        if misread {
            if let Some(listener) = sniff_listener(&self.endpoint) {
                return self.listener_error(listener);
            }
        }
        let hint = if is_certificate_error(&error) {
            format!(" (the server's certificate is not trusted here: pass {CA_FILE_HINT})")
        } else if misread {
            " (the answer is not HTTP/1.1: if the server has TLS on, use https:// and --ca-file; a KubeMQ \
             gRPC port is not the admin endpoint, which is port 9325 unless `--admin-listen` says otherwise)"
                .to_owned()
        } else {
            String::new()
        };
        CliError::Unreachable {
            endpoint: self.endpoint.clone(),
            reason: format!("{error}{hint}"),
        }
    }

    /// What to say of a listener that answered plain HTTP/1.1 in another protocol.
    fn listener_error(&self, listener: Listener) -> CliError {
        let endpoint = self.endpoint.clone();
        match listener {
            Listener::Http2 => CliError::NotAdmin {
                endpoint,
                answer: "in HTTP/2, as a gRPC port such as KubeMQ's does".to_owned(),
            },
            Listener::Tls => CliError::Unreachable {
                endpoint,
                reason: format!("it serves TLS: use https:// and {CA_FILE_HINT}"),
            },
        }
    }
}

/// How to trust a certificate the CLI refused, said the same way wherever it comes up.
const CA_FILE_HINT: &str =
    "--ca-file with the CA that signed its certificate, e.g. the ca.pem `veil cert dev` wrote";

/// What answered a plain HTTP/1.1 request with something that is not HTTP/1.1.
#[derive(Debug, PartialEq, Eq)]
enum Listener {
    /// A TLS alert record (content type 21, version 3.x): a TLS listener refusing plaintext.
    Tls,
    /// An HTTP/2 frame header of a SETTINGS frame (type 4, no flags, stream 0, under 64 KiB), the first
    /// frame an HTTP/2 server sends: a gRPC port.
    Http2,
}

/// The first bytes of a TLS alert record and the length of an HTTP/2 frame header.
const SNIFF_BYTES: usize = 9;

/// Asks `endpoint` again, by hand, so the error can say what listens there instead of "invalid HTTP
/// version". Only on the error path; `None` when the answer fits neither shape or cannot be read.
fn sniff_listener(endpoint: &str) -> Option<Listener> {
    use std::io::{Read, Write};
    let uri: ureq::http::Uri = endpoint.parse().ok()?;
    let address = format!("{}:{}", uri.host()?, uri.port_u16().unwrap_or(80));
    let socket = std::net::ToSocketAddrs::to_socket_addrs(&address)
        .ok()?
        .next()?;
    let mut stream = std::net::TcpStream::connect_timeout(&socket, CONNECT_TIMEOUT).ok()?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: veil\r\nConnection: close\r\n\r\n")
        .ok()?;
    // One deadline for the whole answer: a listener trickling a byte at a time cannot hold the CLI longer.
    let deadline = std::time::Instant::now() + CONNECT_TIMEOUT;
    let mut first = [0u8; SNIFF_BYTES];
    let mut read = 0;
    while read < first.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut first[read..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    classify_answer(&first[..read])
}

fn classify_answer(first: &[u8]) -> Option<Listener> {
    const TLS_ALERT: u8 = 21;
    const HTTP2_SETTINGS: u8 = 4;
    match first {
        [TLS_ALERT, 3, ..] => Some(Listener::Tls),
        [0, _, _, HTTP2_SETTINGS, 0, 0, 0, 0, 0] => Some(Listener::Http2),
        _ => None,
    }
}

/// Whether the handshake refused the server's certificate (rustls's error, as ureq gives it or wrapped in
/// the I/O error of the connection).
fn is_certificate_error(error: &ureq::Error) -> bool {
    let rustls_error = match error {
        ureq::Error::Rustls(inner) => Some(inner),
        ureq::Error::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        _ => None,
    };
    matches!(rustls_error, Some(rustls::Error::InvalidCertificate(_)))
}

/// rustls with the ring provider, trusting `ca_file`'s certificates or else the system's roots.
fn tls_config(ca_file: Option<&Path>) -> Result<ureq::tls::TlsConfig, CliError> {
    let roots = match ca_file {
        Some(path) => ca_file_certificates(path)?,
        None => system_roots(),
    };
    Ok(ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
        .build())
}

/// Every certificate in a PEM file; a file with none is a usage error, not an empty trust store.
fn ca_file_certificates(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, CliError> {
    let pem = std::fs::read(path)
        .map_err(|error| CliError::Usage(format!("--ca-file {}: {error}", path.display())))?;
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(certificate)) => certificates.push(certificate),
            Ok(_) => {}
            Err(error) => {
                return Err(CliError::Usage(format!(
                    "--ca-file {}: {error}",
                    path.display()
                )))
            }
        }
    }
    if certificates.is_empty() {
        return Err(CliError::Usage(format!(
            "--ca-file {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
            path.display()
        )));
    }
    Ok(certificates)
}

/// The system's roots (`SSL_CERT_FILE` and `SSL_CERT_DIR` override where they are read from). A root that
/// does not load is left out: the handshake then says which certificate it could not verify.
fn system_roots() -> Vec<ureq::tls::Certificate<'static>> {
    rustls_native_certs::load_native_certs()
        .certs
        .iter()
        .map(|der| ureq::tls::Certificate::from_der(der.as_ref()).to_owned())
        .collect()
}

/// The API's `{"error":{"code","message"}}`; an answer without it (a proxy's page, a route this server does
/// not have) gets a code made from its status so the message still says what happened.
pub fn decode_error(status: u16, text: &str) -> CliError {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Detail,
    }
    #[derive(serde::Deserialize)]
    struct Detail {
        code: String,
        message: String,
    }
    match serde_json::from_str::<Body>(text) {
        Ok(body) => CliError::Api {
            code: body.error.code,
            message: body.error.message,
        },
        Err(_) => CliError::Api {
            code: format!("Http{status}"),
            message: if text.trim().is_empty() {
                "the server answered without an error body".to_owned()
            } else {
                excerpt(text)
            },
        },
    }
}

/// `application/json`, with or without parameters; the protocols' own JSON types
/// (`application/x-amz-json-1.0`) are not the admin API's.
fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

fn excerpt(text: &str) -> String {
    let mut cut: String = text.trim().chars().take(200).collect();
    if cut.len() < text.trim().len() {
        cut.push('…');
    }
    cut
}

/// `/queues/{namespace}/{queue}` plus `suffix`, each segment escaped.
pub fn queue_path(queue: &QueueArg, suffix: &str) -> String {
    format!(
        "/queues/{}/{}{suffix}",
        segment(&queue.namespace),
        segment(&queue.name)
    )
}

pub fn segment(value: &str) -> String {
    utf8_percent_encode(value, SEGMENT).to_string()
}

/// An answer's JSON as the typed shape a table needs.
pub fn typed<T: DeserializeOwned>(value: &Value) -> Result<T, CliError> {
    T::deserialize(value).map_err(|error| CliError::BadAnswer(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_application_json_is_the_admin_apis_answer() {
        assert!(is_json("application/json"));
        assert!(is_json("application/json; charset=utf-8"));
        assert!(!is_json("application/x-amz-json-1.0"));
        assert!(!is_json("application/xml"));
        assert!(!is_json(""));
    }

    #[test]
    fn the_api_error_body_is_decoded() {
        let error = decode_error(
            404,
            r#"{"error":{"code":"QueueNotFound","message":"queue default/x does not exist"}}"#,
        );
        assert_eq!(
            error.to_string(),
            "QueueNotFound: queue default/x does not exist"
        );
        assert_eq!(error.exit_code(), 4);
    }

    #[test]
    fn an_answer_without_error_body_gets_a_code_from_its_status() {
        let error = decode_error(404, "");
        assert!(error.to_string().starts_with("Http404: "));
        assert_eq!(error.exit_code(), 1);
    }

    #[test]
    fn path_segments_are_escaped() {
        let queue: QueueArg = "ns/a b/c".parse().unwrap();
        assert_eq!(queue_path(&queue, "/purge"), "/queues/ns/a%20b%2Fc/purge");
        let fifo: QueueArg = "orders.fifo".parse().unwrap();
        assert_eq!(queue_path(&fifo, ""), "/queues/default/orders.fifo");
    }

    #[test]
    fn a_tls_alert_and_an_http2_settings_frame_name_their_listener() {
        // What rustls and tonic send back to a plaintext HTTP/1.1 request (seen from veil serve).
        assert_eq!(
            classify_answer(&[0x15, 3, 3, 0, 2, 2, 0x32]),
            Some(Listener::Tls)
        );
        assert_eq!(
            classify_answer(&[0, 0, 0x12, 4, 0, 0, 0, 0, 0]),
            Some(Listener::Http2)
        );
        assert_eq!(classify_answer(b"HTTP/1.0 "), None);
        assert_eq!(classify_answer(&[0, 0, 0x12, 4]), None);
        // Another frame type, or SETTINGS on a stream, is not an HTTP/2 server's opening.
        assert_eq!(classify_answer(&[0, 0, 0x12, 7, 0, 0, 0, 0, 0]), None);
        assert_eq!(classify_answer(&[0, 0, 0x12, 4, 0, 0, 0, 0, 1]), None);
        assert_eq!(classify_answer(&[]), None);
    }
}
