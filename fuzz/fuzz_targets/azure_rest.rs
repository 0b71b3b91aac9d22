//! The Azure Queue Storage REST decoder on a raw HTTP request, in the service's order: `codec::locate` (account
//! and path from the Host header and path), `Query::parse`, `codec::route` (method, path and switches name the
//! operation) and `codec::decode_operation` (query parameters, `x-ms-meta-*` headers, preflight headers and the
//! XML bodies: `<QueueMessage>`, `<SignedIdentifiers>`, `<StorageServiceProperties>`, `<KeyInfo>`).
//!
//! Beyond "no panic", decode→encode→decode round trips through the crate's own writers: a decoded message text
//! written as Azure's `<QueueMessage>` body decodes to the same text; decoded signed identifiers written by
//! `write_signed_identifiers` (what Get Queue ACL answers) decode to the same identifiers; accepted service
//! properties, merged onto the defaults and written by `properties::to_document` (what Get Service Properties
//! answers), parse to the same tree and validate again. An error answer is well-formed XML whose `Code` is the
//! error's code.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quick_xml::events::Event;
use veil_azure::api::Operation;
use veil_azure::codec::query::Query;
use veil_azure::codec::{self, properties, xml, HttpRequestParts};
use veil_fuzz::RawRequest;

fn well_formed(document: &str) {
    let mut reader = quick_xml::Reader::from_str(document);
    loop {
        match reader.read_event() {
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not well-formed XML: {e}\n{document}"),
        }
    }
}

fn message_body(text: &str) -> String {
    let mut out = xml::writer();
    out.open("QueueMessage")
        .leaf("MessageText", text)
        .close("QueueMessage");
    out.finish()
}

fn round_trips(operation: &Operation) {
    match operation {
        Operation::PutMessage { text, .. }
        | Operation::UpdateMessage {
            text: Some(text), ..
        } => {
            let again = codec::message_text(message_body(text).as_bytes());
            assert_eq!(
                again.as_ref(),
                Ok(text),
                "the message text does not round-trip"
            );
        }
        Operation::SetAcl { identifiers, .. } => {
            let document = codec::write_signed_identifiers(identifiers);
            let again = codec::signed_identifiers(document.as_bytes());
            assert_eq!(
                again.as_ref(),
                Ok(identifiers),
                "the ACL does not round-trip\n{document}"
            );
        }
        Operation::SetServiceProperties { xml } => {
            let update = codec::parse_document(xml).expect("accepted properties parse");
            let merged = properties::merge(&properties::default_properties(), &update);
            let document = properties::to_document(&merged);
            let again = codec::parse_document(&document).expect("written properties parse");
            assert_eq!(
                again, merged,
                "the service properties do not round-trip\n{document}"
            );
            assert!(
                properties::validate(&again).is_ok(),
                "written properties no longer validate\n{document}"
            );
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(request) = RawRequest::parse(data) else {
        return;
    };
    let decoded = codec::locate(request.header("host"), request.path).and_then(|location| {
        let query = Query::parse(request.query);
        let kind = codec::route(request.method, &location, &query)?;
        let parts = HttpRequestParts {
            headers: &request.headers,
            body: request.body,
        };
        codec::decode_operation(kind, &parts, &location, &query)
    });
    match decoded {
        Ok(operation) => round_trips(&operation),
        Err(error) => {
            let reply = codec::encode_error(&error, "fuzz-request", "2026-01-01T00:00:00.0000000Z");
            let document = String::from_utf8(reply.body).expect("an error answer is UTF-8");
            well_formed(&document);
            let root = codec::parse_document(&document).expect("an error answer parses");
            assert_eq!(root.child_text("Code"), Some(error.code.as_str()));
        }
    }
});
