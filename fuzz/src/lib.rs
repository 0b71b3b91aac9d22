//! What the fuzz targets share: the HTTP targets take a raw HTTP/1.1 request, as a real client puts it on the
//! wire (their seeds are such requests, recorded by `fuzz/seeds/capture.py`), and this reads it the way the
//! server's HTTP stack would hand it to a front-end: method, raw path, raw query, headers, body.

use http::{HeaderMap, HeaderName, HeaderValue};

/// Headers beyond this are not read; hyper refuses such a request anyway.
const HEADERS_MAX: usize = 64;

/// One request, split as the front-ends receive it.
pub struct RawRequest<'a> {
    pub method: &'a str,
    /// The path as sent, still percent-encoded, without the query.
    pub path: &'a str,
    /// The query as sent (without `?`), if any.
    pub query: Option<&'a str>,
    pub headers: HeaderMap,
    pub body: &'a [u8],
}

impl<'a> RawRequest<'a> {
    /// `None` when the bytes are not a complete request head (hyper would answer 400 before any front-end).
    /// The body is everything after the head: the fuzzer need not keep Content-Length right.
    pub fn parse(bytes: &'a [u8]) -> Option<Self> {
        let mut slots = [httparse::EMPTY_HEADER; HEADERS_MAX];
        let mut request = httparse::Request::new(&mut slots);
        let httparse::Status::Complete(head) = request.parse(bytes).ok()? else {
            return None;
        };
        let method = request.method?;
        let target = request.path?;
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        let mut headers = HeaderMap::new();
        for header in request.headers.iter() {
            // http refuses what hyper would refuse; such a request never reaches a front-end.
            let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
            let value = HeaderValue::from_bytes(header.value).ok()?;
            headers.append(name, value);
        }
        Some(Self {
            method,
            path,
            query,
            headers,
            body: &bytes[head..],
        })
    }

    /// The first value of a header, if it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// The SQS service's pure checks on a decoded action (what it runs before any engine call): message bodies,
/// attributes and FIFO ids of sends, and the name and attributes of CreateQueue / SetQueueAttributes. They
/// must answer with an error, never panic, whatever the decoder let through.
pub fn check_sqs_action(action: &veil_sqs::api::Action) {
    use veil_sqs::api::{Action, MessageInput};
    use veil_sqs::{attributes, namespace::NamespaceMap, validate};

    fn message(input: &MessageInput) {
        if let Some(body) = &input.body {
            let _ = validate::message_contents(body);
        }
        let _ = validate::message_attributes(&input.message_attributes);
        let _ = validate::system_attributes(&input.system_attributes);
        if let Some(id) = &input.deduplication_id {
            let _ = validate::fifo_id("MessageDeduplicationId", id);
        }
        if let Some(id) = &input.group_id {
            let _ = validate::fifo_id("MessageGroupId", id);
        }
    }
    let names = NamespaceMap {
        default_account: "000000000000".into(),
        default_region: "us-east-1".into(),
    };
    match action {
        Action::SendMessage(input) => message(&input.message),
        Action::SendMessageBatch(input) => {
            let _ = validate::batch_entry_ids(
                "SendMessageBatchRequestEntry",
                input.entries.iter().map(|entry| entry.id.as_str()),
            );
            input
                .entries
                .iter()
                .for_each(|entry| message(&entry.message));
        }
        Action::CreateQueue(input) => {
            let fifo = input.queue_name.ends_with(".fifo");
            let _ = validate::queue_name(&input.queue_name, fifo);
            let _ = attributes::parse_settings(&input.attributes, &names, fifo);
        }
        Action::SetQueueAttributes(input) => {
            let _ = attributes::parse_settings(&input.attributes, &names, false);
            let _ = attributes::parse_settings(&input.attributes, &names, true);
        }
        _ => {}
    }
}
