//! `AzureTarget`: the Azure Queue Storage REST protocol over veil-bench's own HTTP client (as `SqsTarget`,
//! hyper 1 with a pooled keep-alive client rather than the Azure SDK, so the client is not the bottleneck),
//! used for Veil's Azure front-end and for Azurite, the emulator an Azure user would test against.
//!
//! Endpoints are path style (`http://127.0.0.1:10001/devstoreaccount1`, the account as the first path
//! segment) and every request is signed with Shared Key for the well-known development account that both
//! Veil and Azurite accept. Mapping:
//! - send = one Put Message per body (Azure has no batch send), all of a batch in flight at once;
//! - receive = Get Messages with `numofmessages` (at most 32) and `visibilitytimeout`. Azure has no long
//!   poll, so a receive with a wait polls with a short back-off until something comes or the wait is over,
//!   as the SDKs' queue processors do;
//! - delete = one Delete Message per message (its pop receipt), all of a batch in flight at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use futures_util::future::try_join_all;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use quick_xml::events::Event;
use sha2::Sha256;

use crate::target::{Delivery, Target, TargetError, TargetResult};

/// The development storage account Azurite and Veil's Azure front-end both accept, with its published key.
const DEV_ACCOUNT: &str = "devstoreaccount1";
const DEV_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The REST API version requests name (Azurite runs with `--skipApiVersionCheck`, so any recent one works).
const API_VERSION: &str = "2021-12-02";
/// Get Messages returns at most this many messages.
const GET_MESSAGES_MAX: usize = 32;
/// First and longest pause between empty polls of a receive that waits: short at first, so an unloaded
/// round trip is not dominated by the poll interval, doubling so an idle consumer does not spin.
const POLL_BACKOFF_MIN: Duration = Duration::from_millis(1);
const POLL_BACKOFF_MAX: Duration = Duration::from_millis(32);
/// Time allowed for one request before it counts as failed (a hung server must not hang the benchmark).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Query values are percent-encoded except for RFC 3986's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// An Azure Queue Storage endpoint. Clones share the connection pool.
#[derive(Clone)]
pub struct AzureTarget {
    client: HttpClient,
    scheme_authority: String,
    host: HeaderValue,
    account: Arc<str>,
    key: Arc<[u8]>,
    name: &'static str,
}

fn fail(target: &'static str, message: String) -> TargetError {
    TargetError::Failed { target, message }
}

/// A message of a Get Messages reply.
#[derive(Debug, Default, PartialEq)]
struct Received {
    id: String,
    pop_receipt: String,
    text: String,
}

/// The messages of a Get Messages reply (`QueueMessagesList`); only the fields veil-bench uses.
fn parse_messages(xml: &str) -> Result<Vec<Received>, String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    let mut current: Option<Received> = None;
    let mut field: Option<String> = None;
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(start) => {
                let name = String::from_utf8_lossy(start.name().as_ref()).into_owned();
                if name == "QueueMessage" {
                    current = Some(Received::default());
                }
                field = Some(name);
            }
            Event::Text(text) => {
                let value = text.decode().map_err(|e| e.to_string())?;
                if let (Some(message), Some(name)) = (current.as_mut(), field.as_deref()) {
                    match name {
                        "MessageId" => message.id.push_str(&value),
                        "PopReceipt" => message.pop_receipt.push_str(&value),
                        "MessageText" => message.text.push_str(&value),
                        _ => {}
                    }
                }
            }
            // Ids, pop receipts and base64 text never hold entity references; one means a reply this
            // parser would misread.
            Event::GeneralRef(reference) => {
                return Err(format!(
                    "unexpected entity &{};",
                    String::from_utf8_lossy(&reference)
                ))
            }
            Event::End(end) => {
                if end.name().as_ref() == b"QueueMessage" {
                    if let Some(message) = current.take() {
                        out.push(message);
                    }
                }
                field = None;
            }
            Event::Eof => return Ok(out),
            _ => {}
        }
    }
}

/// The Shared Key string to sign of a request with no Content-Encoding, -Language, -MD5, Date or
/// conditional headers: the verb, Content-Length (empty when zero) and Content-Type lines, the `x-ms-*`
/// headers sorted, then `/<account><path>` and each query parameter as `\nname:value`, names sorted.
fn string_to_sign(
    method: &Method,
    content_length: usize,
    content_type: &str,
    ms_headers: &[(&str, &str)],
    canonical_resource: &str,
    query: &BTreeMap<&str, String>,
) -> String {
    let length = if content_length == 0 {
        String::new()
    } else {
        content_length.to_string()
    };
    let mut out = format!("{method}\n\n\n{length}\n\n{content_type}\n\n\n\n\n\n\n");
    let mut headers = ms_headers.to_vec();
    headers.sort_unstable();
    for (name, value) in headers {
        out.push_str(name);
        out.push(':');
        out.push_str(value);
        out.push('\n');
    }
    out.push_str(canonical_resource);
    for (name, value) in query {
        out.push('\n');
        out.push_str(name);
        out.push(':');
        out.push_str(value);
    }
    out
}

fn sign(key: &[u8], string_to_sign: &str) -> Result<String, String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).map_err(|e| e.to_string())?;
    mac.update(string_to_sign.as_bytes());
    Ok(BASE64.encode(mac.finalize().into_bytes()))
}

/// A queue name Azure accepts: lower case (the scenarios' names are lower-case letters, digits and hyphens).
fn queue_name(queue: &str) -> String {
    queue.to_ascii_lowercase()
}

impl AzureTarget {
    /// A client for `endpoint`, path style with the account as the first path segment
    /// (`http://127.0.0.1:10001/devstoreaccount1`). Nothing is sent until the first request.
    pub async fn connect(endpoint: &str) -> TargetResult<Self> {
        let name = "azure";
        let uri: Uri = endpoint
            .parse()
            .map_err(|error| fail(name, format!("bad endpoint {endpoint:?}: {error}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(fail(
                name,
                format!("endpoint {endpoint:?}: only http:// is supported"),
            ));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| fail(name, format!("endpoint {endpoint:?} has no host:port")))?
            .clone();
        let account = uri
            .path()
            .trim_matches('/')
            .split('/')
            .next()
            .filter(|account| !account.is_empty())
            .unwrap_or(DEV_ACCOUNT);
        if account != DEV_ACCOUNT {
            return Err(fail(
                name,
                format!("endpoint {endpoint:?}: only the account {DEV_ACCOUNT} is supported"),
            ));
        }
        let key = BASE64
            .decode(DEV_ACCOUNT_KEY)
            .map_err(|error| fail(name, format!("the account key is not base64: {error}")))?;
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|error| fail(name, format!("bad host in {endpoint:?}: {error}")))?;
        let mut connector = HttpConnector::new();
        // Small request/response pairs: Nagle's algorithm would add tens of milliseconds to each.
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(usize::MAX)
            .build(connector);
        Ok(Self {
            client,
            scheme_authority: format!("http://{authority}"),
            host,
            account: Arc::from(account),
            key: Arc::from(key),
            name,
        })
    }

    /// The same client reporting under another name ("veil-azure", "azurite").
    pub fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// One signed request to `/<account><path>` with `query` (unencoded values); the reply body of a
    /// status in `expected`, or the service's error as a [`TargetError`].
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<String>,
        expected: &[StatusCode],
    ) -> TargetResult<Bytes> {
        let what = format!("{method} {path}");
        let full_path = format!("/{}{path}", self.account);
        let query: BTreeMap<&str, String> = query.iter().cloned().collect();
        let mut uri = format!("{}{full_path}", self.scheme_authority);
        for (index, (name, value)) in query.iter().enumerate() {
            uri.push(if index == 0 { '?' } else { '&' });
            uri.push_str(name);
            uri.push('=');
            uri.extend(utf8_percent_encode(value, QUERY_VALUE));
        }
        let date = httpdate::fmt_http_date(SystemTime::now());
        let body = body.unwrap_or_default();
        let content_type = if body.is_empty() {
            ""
        } else {
            "application/xml"
        };
        let to_sign = string_to_sign(
            &method,
            body.len(),
            content_type,
            &[("x-ms-date", &date), ("x-ms-version", API_VERSION)],
            &format!("/{}{full_path}", self.account),
            &query,
        );
        let signature = sign(&self.key, &to_sign).map_err(|e| fail(self.name, e))?;
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(HOST, self.host.clone())
            .header("x-ms-date", date)
            .header("x-ms-version", API_VERSION)
            .header(
                AUTHORIZATION,
                format!("SharedKey {}:{signature}", self.account),
            );
        if !content_type.is_empty() {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| fail(self.name, format!("{what}: building the request: {error}")))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| fail(self.name, format!("{what}: {error}")))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|error| fail(self.name, format!("{what}: reading the reply: {error}")))?
                .to_bytes();
            Ok::<_, TargetError>((status, body))
        };
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                fail(
                    self.name,
                    format!("{what}: no reply within {REQUEST_TIMEOUT:?}"),
                )
            })??;
        if expected.contains(&status) {
            return Ok(body);
        }
        Err(fail(
            self.name,
            format!(
                "{what}: HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ),
        ))
    }

    /// One Get Messages.
    async fn get_messages(
        &self,
        queue: &str,
        max: usize,
        visibility_s: u32,
    ) -> TargetResult<Vec<Delivery>> {
        let query = [
            ("numofmessages", max.clamp(1, GET_MESSAGES_MAX).to_string()),
            ("visibilitytimeout", visibility_s.to_string()),
        ];
        let body = self
            .call(
                Method::GET,
                &format!("/{queue}/messages"),
                &query,
                None,
                &[StatusCode::OK],
            )
            .await?;
        let xml = std::str::from_utf8(&body)
            .map_err(|_| fail(self.name, "Get Messages: reply is not UTF-8".into()))?;
        let messages = parse_messages(xml)
            .map_err(|error| fail(self.name, format!("Get Messages: malformed reply: {error}")))?;
        messages
            .into_iter()
            .map(|message| {
                let body = BASE64.decode(message.text.trim()).map_err(|error| {
                    fail(
                        self.name,
                        format!("message {}: text is not base64: {error}", message.id),
                    )
                })?;
                Ok(Delivery {
                    body: Bytes::from(body),
                    handle: format!("{} {}", message.id, message.pop_receipt),
                })
            })
            .collect()
    }
}

impl Target for AzureTarget {
    fn name(&self) -> &'static str {
        self.name
    }

    /// Create Queue (201, or 204 when it exists), then Clear Messages, so a reused name starts empty.
    async fn prepare(&self, queue: &str, _visibility_s: u32) -> TargetResult<()> {
        let queue = queue_name(queue);
        self.call(
            Method::PUT,
            &format!("/{queue}"),
            &[],
            None,
            &[StatusCode::CREATED, StatusCode::NO_CONTENT],
        )
        .await?;
        self.call(
            Method::DELETE,
            &format!("/{queue}/messages"),
            &[],
            None,
            &[StatusCode::NO_CONTENT],
        )
        .await
        .map(|_| ())
    }

    async fn send(&self, queue: &str, bodies: Vec<Bytes>) -> TargetResult<()> {
        let path = format!("/{}/messages", queue_name(queue));
        let puts = bodies.iter().map(|body| {
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessage><MessageText>{}</MessageText></QueueMessage>",
                BASE64.encode(body)
            );
            self.call(
                Method::POST,
                &path,
                &[],
                Some(xml),
                &[StatusCode::CREATED],
            )
        });
        try_join_all(puts).await.map(|_| ())
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility_s: u32,
        wait_s: u32,
    ) -> TargetResult<Vec<Delivery>> {
        let queue = queue_name(queue);
        let deadline = Instant::now() + Duration::from_secs(u64::from(wait_s));
        let mut pause = POLL_BACKOFF_MIN;
        loop {
            let got = self.get_messages(&queue, max, visibility_s).await?;
            let now = Instant::now();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(POLL_BACKOFF_MAX);
        }
    }

    async fn delete(&self, queue: &str, handles: Vec<String>) -> TargetResult<()> {
        let queue = queue_name(queue);
        let deletes = handles.iter().map(|handle| {
            let queue = &queue;
            async move {
                let (id, receipt) = handle.split_once(' ').ok_or_else(|| {
                    fail(self.name, format!("handle {handle:?} has no pop receipt"))
                })?;
                // 404 is a stale pop receipt (the message was received again, or already deleted): like an
                // SQS receipt of a deleted message, it settles nothing and is not an error.
                self.call(
                    Method::DELETE,
                    &format!("/{queue}/messages/{id}"),
                    &[("popreceipt", receipt.to_owned())],
                    None,
                    &[StatusCode::NO_CONTENT, StatusCode::NOT_FOUND],
                )
                .await
            }
        });
        try_join_all(deletes).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_read_from_a_get_messages_reply() {
        let xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList><QueueMessage>\
            <MessageId>5974b586-0df3-4e2d-ad0c-18e3892bfca2</MessageId>\
            <InsertionTime>Fri, 09 Oct 2009 21:04:30 GMT</InsertionTime>\
            <PopReceipt>YzQ4Yzg1MDIGM0MDFiZDAwYzEw</PopReceipt><DequeueCount>1</DequeueCount>\
            <MessageText>aGVsbG8=</MessageText></QueueMessage><QueueMessage><MessageId>b</MessageId>\
            <PopReceipt>r+/=</PopReceipt><MessageText></MessageText></QueueMessage></QueueMessagesList>";
        let messages = parse_messages(xml).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].id, "5974b586-0df3-4e2d-ad0c-18e3892bfca2");
        assert_eq!(messages[0].pop_receipt, "YzQ4Yzg1MDIGM0MDFiZDAwYzEw");
        assert_eq!(messages[0].text, "aGVsbG8=");
        assert_eq!(messages[1].pop_receipt, "r+/=");
        assert!(parse_messages("<QueueMessagesList/>").unwrap().is_empty());
        assert!(parse_messages("<QueueMessagesList><QueueMessage><MessageText>&amp;").is_err());
    }

    #[test]
    fn the_string_to_sign_follows_shared_key_layout() {
        let query = BTreeMap::from([
            ("visibilitytimeout", "30".to_owned()),
            ("numofmessages", "10".to_owned()),
        ]);
        let signed = string_to_sign(
            &Method::GET,
            0,
            "",
            &[("x-ms-version", API_VERSION), ("x-ms-date", "D")],
            "/devstoreaccount1/devstoreaccount1/q/messages",
            &query,
        );
        assert_eq!(
            signed,
            "GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:D\nx-ms-version:2021-12-02\n\
             /devstoreaccount1/devstoreaccount1/q/messages\nnumofmessages:10\nvisibilitytimeout:30"
        );
        let put = string_to_sign(&Method::POST, 12, "application/xml", &[], "/a/a/q", &query);
        assert!(put.starts_with("POST\n\n\n12\n\napplication/xml\n"));
    }

    /// Against a live endpoint (`bench/run` starts Azurite and Veil and exercises this target for real):
    /// `VEIL_BENCH_AZURE=http://127.0.0.1:10001/devstoreaccount1 cargo test -p veil-bench -- --ignored azure`.
    #[tokio::test]
    #[ignore = "needs Azurite or Veil's Azure front-end; set VEIL_BENCH_AZURE"]
    async fn azure_round_trip_and_redelivery() {
        let endpoint = std::env::var("VEIL_BENCH_AZURE")
            .unwrap_or_else(|_| "http://127.0.0.1:10001/devstoreaccount1".into());
        let target = AzureTarget::connect(&endpoint).await.expect("connect");
        crate::target::check_round_trip_and_redelivery(target).await;
    }
}
