//! The SQS Query protocol decoder (`veil_sqs::codec::decode` without an `X-Amz-Target`: form fields from the
//! query string and a POST body, flattened names such as `Entries.member.1.Id` rebuilt into the action) on a
//! raw HTTP request, then the service's pure checks on what it decoded.
//!
//! Beyond "no panic": the fields mean the same wherever they travel — the same form sent as a GET query string
//! and as a POST body decodes to the same action or error code; and an error answer is well-formed XML whose
//! `Code` is the error's Query code and whose `Message`, unescaped, is the error's message byte for byte
//! (the fuzzer's text goes through the XML escaping).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quick_xml::events::Event;
use veil_fuzz::{check_sqs_action, RawRequest};
use veil_sqs::api::Protocol;
use veil_sqs::codec::{self, HttpRequestParts};

/// The text between `<name>` and `</name>`, unescaped (our writer never puts `<` in text).
fn element_text(document: &str, name: &str) -> String {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = document.find(&open).expect("element present") + open.len();
    let end = start + document[start..].find(&close).expect("element closed");
    quick_xml::escape::unescape(&document[start..end])
        .expect("our escaping unescapes")
        .into_owned()
}

fuzz_target!(|data: &[u8]| {
    let Some(request) = RawRequest::parse(data) else {
        return;
    };
    let parts = HttpRequestParts {
        method: request.method,
        query: request.query,
        target: None,
        body: request.body,
    };
    let (protocol, decoded) = codec::decode(&parts);
    assert_eq!(protocol, Protocol::Query);

    // The form the request carries, as one text, sent once in the query string and once in a POST body.
    let form: Vec<u8> = match (request.query, request.method.eq_ignore_ascii_case("POST")) {
        (Some(query), true) if !request.body.is_empty() => {
            [query.as_bytes(), b"&", request.body].concat()
        }
        (Some(query), _) => query.as_bytes().to_vec(),
        (None, true) => request.body.to_vec(),
        (None, false) => Vec::new(),
    };
    if let Ok(form) = std::str::from_utf8(&form) {
        let (_, by_get) = codec::decode(&HttpRequestParts {
            method: "GET",
            query: Some(form),
            target: None,
            body: b"",
        });
        let (_, by_post) = codec::decode(&HttpRequestParts {
            method: "POST",
            query: None,
            target: None,
            body: form.as_bytes(),
        });
        match (&by_get, &by_post) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "GET and POST decode differently"),
            (Err(a), Err(b)) => assert_eq!(a.code, b.code, "GET and POST fail differently"),
            _ => panic!("GET and POST disagree: {by_get:?} vs {by_post:?}"),
        }
    }

    match decoded {
        Ok(request) => check_sqs_action(&request.action),
        Err(error) => {
            let reply = codec::encode_error(protocol, &error, "fuzz-request");
            let document = String::from_utf8(reply.body).expect("an error answer is UTF-8");
            let mut reader = quick_xml::Reader::from_str(&document);
            loop {
                match reader.read_event() {
                    Ok(Event::Eof) => break,
                    Ok(_) => {}
                    Err(e) => panic!("the error answer is not well-formed XML: {e}\n{document}"),
                }
            }
            assert_eq!(element_text(&document, "Code"), error.code.query_code());
            // The writer shows each character XML 1.0 cannot carry as U+FFFD (docs/security.md "Characters
            // XML cannot carry"); everything else survives the escaping exactly.
            assert_eq!(
                element_text(&document, "Message"),
                veil_xml::xml_chars(&error.message_in(Protocol::Query)),
                "the message does not survive the XML escaping"
            );
        }
    }
});
