//! Codec tests on bytes: request decoding and its errors, the XML Azure clients parse, and the Shared Key
//! and SAS strings-to-sign against known vectors. The vectors' signatures were computed outside Veil with
//! the azure-storage-queue SDK's signing code and the development account's published key.

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use super::*;
use crate::api::*;
use crate::auth::{self, HeaderOrder, KeyScheme, Sas, SignedRequest};
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits::{self, DEV_ACCOUNT_KEY};

const DATE: &str = "Mon, 29 Aug 2011 17:17:21 GMT";

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn decode_request(
    method: &str,
    path_and_query: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> AzureResult<Operation> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    let location = locate(Some("127.0.0.1:10001"), path)?;
    let query = query::Query::parse(query);
    let kind = route(method, &location, &query)?;
    decode_operation(kind, &HttpRequestParts { headers, body }, &location, &query)
}

fn ok(method: &str, path_and_query: &str, body: &[u8]) -> Operation {
    decode_request(method, path_and_query, &HeaderMap::new(), body).unwrap()
}

fn err(method: &str, path_and_query: &str, body: &[u8]) -> AzureError {
    decode_request(method, path_and_query, &HeaderMap::new(), body).unwrap_err()
}

fn message_body(text: &str) -> Vec<u8> {
    format!("<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>{text}</MessageText></QueueMessage>").into_bytes()
}

#[test]
fn path_style_names_the_account_first_and_dotted_hosts_name_it_in_the_host() {
    let location = locate(Some("127.0.0.1:10001"), "/devstoreaccount1/orders/messages").unwrap();
    assert_eq!(location.account, "devstoreaccount1");
    assert_eq!(location.segments, vec!["orders", "messages"]);
    let location = locate(Some("acct.queue.example:443"), "/orders").unwrap();
    assert_eq!(location.account, "acct");
    assert_eq!(location.segments, vec!["orders"]);
    let location = locate(Some("localhost"), "/devstoreaccount1-secondary/").unwrap();
    assert_eq!(location.primary_account(), "devstoreaccount1");
}

#[test]
fn put_message_reads_visibility_ttl_and_the_xml_decoded_text() {
    let op = ok(
        "POST",
        "/devstoreaccount1/orders/messages?visibilitytimeout=10&messagettl=-1&timeout=30",
        &message_body("a &amp; b &lt;3"),
    );
    assert_eq!(
        op,
        Operation::PutMessage {
            queue: "orders".into(),
            text: "a & b <3".into(),
            visibility_s: 10,
            ttl: MessageTtl::Never,
        }
    );
    let op = ok(
        "POST",
        "/devstoreaccount1/orders/messages",
        &message_body("x"),
    );
    assert!(matches!(
        op,
        Operation::PutMessage {
            visibility_s: 0,
            ttl: MessageTtl::Seconds(604_800),
            ..
        }
    ));
}

#[test]
fn message_text_of_64_kib_is_accepted_and_one_byte_more_is_413() {
    let at_limit = "a".repeat(limits::MESSAGE_TEXT_BYTES_MAX);
    ok(
        "POST",
        "/devstoreaccount1/q1x/messages",
        &message_body(&at_limit),
    );
    let over = "a".repeat(limits::MESSAGE_TEXT_BYTES_MAX + 1);
    let error = err(
        "POST",
        "/devstoreaccount1/q1x/messages",
        &message_body(&over),
    );
    assert_eq!(error.code, ErrorCode::RequestBodyTooLarge);
    assert_eq!(error.code.status(), 413);
    // Counted after decoding: 64 KiB of `&amp;` is 64 KiB of text.
    let escaped = "&amp;".repeat(limits::MESSAGE_TEXT_BYTES_MAX);
    ok(
        "POST",
        "/devstoreaccount1/q1x/messages",
        &message_body(&escaped),
    );
}

#[test]
fn numofmessages_outside_1_to_32_is_out_of_range_with_the_four_detail_fields() {
    let error = err(
        "GET",
        "/devstoreaccount1/orders/messages?numofmessages=33",
        b"",
    );
    assert_eq!(error.code, ErrorCode::OutOfRangeQueryParameterValue);
    assert_eq!(
        error.details,
        vec![
            ("QueryParameterName", "numofmessages".to_string()),
            ("QueryParameterValue", "33".to_string()),
            ("MinimumAllowed", "1".to_string()),
            ("MaximumAllowed", "32".to_string()),
        ]
    );
    assert_eq!(
        err(
            "GET",
            "/devstoreaccount1/orders/messages?numofmessages=0",
            b""
        )
        .code,
        ErrorCode::OutOfRangeQueryParameterValue
    );
    let error = err(
        "GET",
        "/devstoreaccount1/orders/messages?numofmessages=abc",
        b"",
    );
    assert_eq!(error.code, ErrorCode::InvalidQueryParameterValue);
}

#[test]
fn get_visibility_is_1_to_604800_and_put_and_update_allow_0() {
    assert_eq!(
        err(
            "GET",
            "/devstoreaccount1/q1x/messages?visibilitytimeout=0",
            b""
        )
        .code,
        ErrorCode::OutOfRangeQueryParameterValue
    );
    assert_eq!(
        err(
            "GET",
            "/devstoreaccount1/q1x/messages?visibilitytimeout=604801",
            b""
        )
        .code,
        ErrorCode::OutOfRangeQueryParameterValue
    );
    assert_eq!(
        ok("GET", "/devstoreaccount1/q1x/messages", b""),
        Operation::GetMessages {
            queue: "q1x".into(),
            count: 1,
            visibility_s: 30
        }
    );
    ok(
        "POST",
        "/devstoreaccount1/q1x/messages?visibilitytimeout=0",
        &message_body("x"),
    );
    assert_eq!(
        err(
            "POST",
            "/devstoreaccount1/q1x/messages?visibilitytimeout=604801",
            &message_body("x")
        )
        .code,
        ErrorCode::OutOfRangeQueryParameterValue
    );
}

#[test]
fn messagettl_is_minus_one_or_at_least_one_and_the_initial_invisibility_ends_before_it() {
    assert_eq!(
        err(
            "POST",
            "/devstoreaccount1/q1x/messages?messagettl=0",
            &message_body("x")
        )
        .code,
        ErrorCode::OutOfRangeQueryParameterValue
    );
    assert_eq!(
        err(
            "POST",
            "/devstoreaccount1/q1x/messages?messagettl=-2",
            &message_body("x")
        )
        .code,
        ErrorCode::OutOfRangeQueryParameterValue
    );
    let error = err(
        "POST",
        "/devstoreaccount1/q1x/messages?messagettl=10&visibilitytimeout=10",
        &message_body("x"),
    );
    assert_eq!(error.code, ErrorCode::OutOfRangeQueryParameterValue);
    assert_eq!(
        error.details[0],
        ("QueryParameterName", "visibilitytimeout".to_string())
    );
    ok(
        "POST",
        "/devstoreaccount1/q1x/messages?messagettl=-1&visibilitytimeout=604800",
        &message_body("x"),
    );
}

#[test]
fn peekonly_true_is_peek() {
    assert_eq!(
        ok(
            "GET",
            "/devstoreaccount1/q1x/messages?peekonly=true&numofmessages=32",
            b""
        ),
        Operation::PeekMessages {
            queue: "q1x".into(),
            count: 32
        }
    );
}

#[test]
fn delete_and_update_need_a_well_formed_pop_receipt() {
    let id = "0b8c6a7e-2d34-4b59-9d0e-5b2f6f1c8a10";
    assert_eq!(
        err(
            "DELETE",
            &format!("/devstoreaccount1/q1x/messages/{id}"),
            b""
        )
        .code,
        ErrorCode::MissingRequiredQueryParameter
    );
    let error = err(
        "DELETE",
        &format!("/devstoreaccount1/q1x/messages/{id}?popreceipt=AgAAAAMAAAAAAAAA"),
        b"",
    );
    assert_eq!(error.code, ErrorCode::InvalidQueryParameterValue);
    assert!(error
        .details
        .contains(&("QueryParameterName", "popreceipt".to_string())));
    assert!(error
        .details
        .contains(&("Reason", "Invalid pop receipt format".to_string())));
    let receipt = crate::pop_receipt::encode(&[1; 16], "abc");
    let error = err(
        "PUT",
        &format!("/devstoreaccount1/q1x/messages/{id}?popreceipt={receipt}"),
        b"",
    );
    assert_eq!(
        error.code,
        ErrorCode::MissingRequiredQueryParameter,
        "update needs visibilitytimeout"
    );
    let op = ok(
        "PUT",
        &format!("/devstoreaccount1/q1x/messages/{id}?popreceipt={receipt}&visibilitytimeout=0"),
        b"",
    );
    assert!(matches!(
        op,
        Operation::UpdateMessage {
            visibility_s: 0,
            text: None,
            ..
        }
    ));
    let op = ok(
        "PUT",
        &format!("/devstoreaccount1/q1x/messages/{id}?popreceipt={receipt}&visibilitytimeout=5"),
        &message_body("new"),
    );
    assert!(matches!(op, Operation::UpdateMessage { text: Some(ref t), .. } if t == "new"));
}

#[test]
fn queue_names_follow_azure_rules() {
    assert_eq!(
        err("PUT", "/devstoreaccount1/ab", b"").code,
        ErrorCode::OutOfRangeInput
    );
    assert_eq!(
        err("PUT", &format!("/devstoreaccount1/{}", "a".repeat(64)), b"").code,
        ErrorCode::OutOfRangeInput
    );
    for bad in ["Orders", "a--b", "-abc", "abc-", "a_bc"] {
        assert_eq!(
            err("PUT", &format!("/devstoreaccount1/{bad}"), b"").code,
            ErrorCode::InvalidResourceName,
            "{bad}"
        );
    }
    ok("PUT", &format!("/devstoreaccount1/{}", "a".repeat(63)), b"");
    ok("PUT", "/devstoreaccount1/a-1-b", b"");
}

#[test]
fn create_reads_metadata_headers_and_refuses_names_that_are_not_identifiers() {
    let h = headers(&[("x-ms-meta-color", "blue"), ("x-ms-meta-_n2", " 2 ")]);
    let op = decode_request("PUT", "/devstoreaccount1/q1x", &h, b"").unwrap();
    let Operation::CreateQueue { metadata, .. } = op else {
        panic!("not a create")
    };
    assert_eq!(metadata.get("color").map(String::as_str), Some("blue"));
    assert_eq!(metadata.get("_n2").map(String::as_str), Some("2"));
    let h = headers(&[("x-ms-meta-1bad", "x")]);
    assert_eq!(
        decode_request("PUT", "/devstoreaccount1/q1x?comp=metadata", &h, b"")
            .unwrap_err()
            .code,
        ErrorCode::InvalidMetadata
    );
}

#[test]
fn list_queues_reads_prefix_marker_maxresults_and_include() {
    assert_eq!(
        ok("GET", "/devstoreaccount1/?comp=list&prefix=or&marker=%2Fdevstoreaccount1%2Forders&maxresults=9000&include=metadata", b""),
        Operation::ListQueues {
            prefix: Some("or".into()),
            marker: Some("/devstoreaccount1/orders".into()),
            max_results: Some(5_000),
            include_metadata: true,
        }
    );
    assert_eq!(
        err("GET", "/devstoreaccount1/?comp=list&maxresults=0", b"").code,
        ErrorCode::OutOfRangeQueryParameterValue
    );
}

#[test]
fn acl_bodies_hold_at_most_five_policies_with_raup_permissions() {
    let policy = |id: usize| {
        format!("<SignedIdentifier><Id>p{id}</Id><AccessPolicy><Start>2024-05-01T00:00:00Z</Start><Expiry>2024-05-02T00:00:00Z</Expiry><Permission>raup</Permission></AccessPolicy></SignedIdentifier>")
    };
    let five: String = (0..5).map(policy).collect();
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers>{five}</SignedIdentifiers>"
    );
    let Operation::SetAcl { identifiers, .. } =
        ok("PUT", "/devstoreaccount1/q1x?comp=acl", body.as_bytes())
    else {
        panic!()
    };
    assert_eq!(identifiers.len(), 5);
    assert_eq!(identifiers[0].permission.as_deref(), Some("raup"));
    let written = write_signed_identifiers(&identifiers);
    assert_eq!(
        signed_identifiers(written.as_bytes()).unwrap(),
        identifiers,
        "stored form reads back"
    );
    let six = format!("<SignedIdentifiers>{five}{}</SignedIdentifiers>", policy(5));
    assert_eq!(
        err("PUT", "/devstoreaccount1/q1x?comp=acl", six.as_bytes()).code,
        ErrorCode::InvalidXmlDocument
    );
    let bad = "<SignedIdentifiers><SignedIdentifier><Id>x</Id><AccessPolicy><Permission>rwd</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>";
    assert_eq!(
        err("PUT", "/devstoreaccount1/q1x?comp=acl", bad.as_bytes()).code,
        ErrorCode::InvalidXmlNodeValue
    );
}

#[test]
fn unknown_resources_and_verbs_are_refused() {
    assert_eq!(
        err("POST", "/devstoreaccount1/q1x", b"").code,
        ErrorCode::UnsupportedHttpVerb
    );
    assert_eq!(
        err("GET", "/devstoreaccount1/q1x/other", b"").code,
        ErrorCode::InvalidUri
    );
    assert_eq!(
        err("GET", "/devstoreaccount1/q1x?comp=bogus", b"").code,
        ErrorCode::InvalidQueryParameterValue
    );
    assert_eq!(
        err("GET", "/devstoreaccount1/", b"").code,
        ErrorCode::InvalidQueryParameterValue
    );
}

#[test]
fn a_stored_body_xml_cannot_carry_is_written_with_the_replacement_character() {
    // A KubeMQ body: a NUL, a BEL, U+FFFE, then a byte that is not UTF-8; each shown as U+FFFD.
    let reply = encode_output(&Output::Messages {
        status: 200,
        messages: vec![QueueMessage {
            message_id: "id-1".into(),
            insertion_time: 0,
            expiration_time: veil_core::NEVER,
            pop_receipt: None,
            time_next_visible: None,
            dequeue_count: None,
            text: Some(bytes::Bytes::from_static(
                b"a\x00b\x07c\xef\xbf\xbed\xffe\tf",
            )),
        }],
    });
    let body = String::from_utf8(reply.body).unwrap();
    assert!(
        body.contains("<MessageText>a\u{FFFD}b\u{FFFD}c\u{FFFD}d\u{FFFD}e\tf</MessageText>"),
        "{body}"
    );
    assert!(super::xml::parse(body.as_bytes()).is_ok(), "{body}");
}

#[test]
fn put_and_update_refuse_a_character_xml_forbids_as_invalid_xml_document() {
    for text in ["a\u{0}b", "\u{1F}", "\u{FFFF}", "&#x1;", "&#xFFFE;"] {
        let put = err(
            "POST",
            "/devstoreaccount1/q1x/messages",
            &message_body(text),
        );
        assert_eq!(put.code, ErrorCode::InvalidXmlDocument, "{text:?}");
        let receipt = crate::pop_receipt::encode(&[1; 16], "abc");
        let update = err(
            "PUT",
            &format!("/devstoreaccount1/q1x/messages/id?popreceipt={receipt}&visibilitytimeout=0"),
            &message_body(text),
        );
        assert_eq!(update.code, ErrorCode::InvalidXmlDocument, "{text:?}");
    }
}

#[test]
fn get_messages_xml_has_every_field_in_azure_order() {
    let reply = encode_output(&Output::Messages {
        status: 200,
        messages: vec![QueueMessage {
            message_id: "id-1".into(),
            insertion_time: 1_314_638_241_000,
            expiration_time: veil_core::NEVER,
            pop_receipt: Some("r".into()),
            time_next_visible: Some(1_314_638_271_000),
            dequeue_count: Some(2),
            text: Some("<hi>".into()),
        }],
    });
    assert_eq!(reply.status, 200);
    assert_eq!(
        String::from_utf8(reply.body).unwrap(),
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList><QueueMessage><MessageId>id-1</MessageId>\
<InsertionTime>Mon, 29 Aug 2011 17:17:21 GMT</InsertionTime><ExpirationTime>Fri, 31 Dec 9999 23:59:59 GMT</ExpirationTime>\
<PopReceipt>r</PopReceipt><TimeNextVisible>Mon, 29 Aug 2011 17:17:51 GMT</TimeNextVisible><DequeueCount>2</DequeueCount>\
<MessageText>&lt;hi&gt;</MessageText></QueueMessage></QueueMessagesList>"
    );
}

#[test]
fn list_xml_always_has_next_marker_and_metadata_when_asked() {
    let mut metadata = Metadata::new();
    metadata.insert("color".into(), "blue".into());
    let reply = encode_output(&Output::QueueList(QueueList {
        service_endpoint: "http://127.0.0.1:10001/devstoreaccount1/".into(),
        prefix: Some("o".into()),
        marker: None,
        max_results: Some(1),
        queues: vec![QueueItem {
            name: "orders".into(),
            metadata: Some(metadata),
        }],
        next_marker: None,
    }));
    assert_eq!(
        String::from_utf8(reply.body).unwrap(),
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ServiceEndpoint=\"http://127.0.0.1:10001/devstoreaccount1/\">\
<Prefix>o</Prefix><MaxResults>1</MaxResults><Queues><Queue><Name>orders</Name><Metadata><color>blue</color></Metadata></Queue></Queues>\
<NextMarker /></EnumerationResults>"
    );
}

#[test]
fn errors_carry_code_message_details_and_the_error_code_header() {
    let error = AzureError::out_of_range("numofmessages", 33, 1, 32);
    let reply = encode_error(&error, "req-1", "2011-08-29T17:17:21.0000000Z");
    assert_eq!(reply.status, 400);
    assert!(reply.headers.contains(&(
        "x-ms-error-code".into(),
        "OutOfRangeQueryParameterValue".into()
    )));
    let body = String::from_utf8(reply.body).unwrap();
    assert!(
        body.contains("<Code>OutOfRangeQueryParameterValue</Code>"),
        "{body}"
    );
    assert!(
        body.contains("RequestId:req-1\nTime:2011-08-29T17:17:21.0000000Z</Message>"),
        "{body}"
    );
    assert!(body.ends_with("<QueryParameterName>numofmessages</QueryParameterName><QueryParameterValue>33</QueryParameterValue><MinimumAllowed>1</MinimumAllowed><MaximumAllowed>32</MaximumAllowed></Error>"), "{body}");
}

#[test]
fn update_answers_the_new_pop_receipt_and_time_next_visible_in_headers() {
    let reply = encode_output(&Output::Updated {
        pop_receipt: "new".into(),
        time_next_visible: 1_314_638_241_000,
    });
    assert_eq!(reply.status, 204);
    assert!(reply
        .headers
        .contains(&("x-ms-popreceipt".into(), "new".into())));
    assert!(reply
        .headers
        .contains(&("x-ms-time-next-visible".into(), DATE.into())));
}

// ----- Shared Key and SAS vectors -----

fn dev_key() -> Vec<u8> {
    auth::decode_key(DEV_ACCOUNT_KEY).unwrap()
}

#[test]
fn shared_key_string_to_sign_doubles_the_account_in_path_style() {
    let h = headers(&[
        ("x-ms-version", "2026-04-06"),
        ("x-ms-date", DATE),
        (
            "x-ms-client-request-id",
            "11111111-2222-3333-4444-555555555555",
        ),
        ("accept", "application/xml"),
        ("user-agent", "azsdk-python-storage-queue/12.18.0"),
    ]);
    let request = SignedRequest {
        method: "GET",
        path: "/devstoreaccount1/orders/messages",
        query: Some("visibilitytimeout=300&numofmessages=5"),
        headers: &h,
    };
    let expected = "GET\n\n\n\n\n\n\n\n\n\n\n\n\
x-ms-client-request-id:11111111-2222-3333-4444-555555555555\nx-ms-date:Mon, 29 Aug 2011 17:17:21 GMT\nx-ms-version:2026-04-06\n\
/devstoreaccount1/devstoreaccount1/orders/messages\nnumofmessages:5\nvisibilitytimeout:300";
    assert_eq!(
        auth::string_to_sign(&request, "devstoreaccount1", HeaderOrder::Service),
        expected
    );
    let signature = "Xq5InrKoM5h0htJRVuWiDDPFHYCeYzUV+5IuS1XQ5pg=";
    assert_eq!(auth::sign(&dev_key(), expected), signature);
    auth::verify_shared_key(
        &request,
        "devstoreaccount1",
        &dev_key(),
        signature,
        KeyScheme::SharedKey,
    )
    .unwrap();
    let wrong = auth::verify_shared_key(
        &request,
        "devstoreaccount1",
        b"another key",
        signature,
        KeyScheme::SharedKey,
    )
    .unwrap_err();
    assert_eq!(wrong.code, ErrorCode::AuthenticationFailed);
    assert_eq!(wrong.code.status(), 403);
}

#[test]
fn shared_key_signs_content_headers_and_decoded_query_values() {
    let h = headers(&[
        ("content-type", "application/xml"),
        ("content-length", "63"),
        ("x-ms-version", "2018-03-28"),
        ("x-ms-date", DATE),
    ]);
    let request = SignedRequest {
        method: "POST",
        path: "/devstoreaccount1/orders/messages",
        query: Some("visibilitytimeout=0&messagettl=%2D1"),
        headers: &h,
    };
    let expected = "POST\n\n\n63\n\napplication/xml\n\n\n\n\n\n\n\
x-ms-date:Mon, 29 Aug 2011 17:17:21 GMT\nx-ms-version:2018-03-28\n\
/devstoreaccount1/devstoreaccount1/orders/messages\nmessagettl:-1\nvisibilitytimeout:0";
    assert_eq!(
        auth::string_to_sign(&request, "devstoreaccount1", HeaderOrder::Service),
        expected
    );
    assert_eq!(
        auth::sign(&dev_key(), expected),
        "kOedxjfAD2FHrwWeA5MLwxfj9A44U+7CTO+enbBwCEo="
    );
}

#[test]
fn a_zero_content_length_is_signed_as_empty() {
    let h = headers(&[("content-length", "0"), ("x-ms-version", "2026-04-06")]);
    let request = SignedRequest {
        method: "DELETE",
        path: "/devstoreaccount1/q1x/messages",
        query: None,
        headers: &h,
    };
    let text = auth::string_to_sign(&request, "devstoreaccount1", HeaderOrder::Service);
    assert!(text.starts_with("DELETE\n\n\n\n"), "{text:?}");
}

#[test]
fn service_header_order_ignores_hyphens_before_comparing_letters() {
    // The service compares names without their hyphens first and weighs '_' below digits, so
    // "x-ms-meta-a_b" comes before "x-ms-meta-a0"; byte order says the opposite.
    let h = headers(&[("x-ms-meta-a0", "1"), ("x-ms-meta-a_b", "2")]);
    let request = SignedRequest {
        method: "PUT",
        path: "/devstoreaccount1/q1x",
        query: Some("comp=metadata"),
        headers: &h,
    };
    let service = auth::string_to_sign(&request, "devstoreaccount1", HeaderOrder::Service);
    let ordinal = auth::string_to_sign(&request, "devstoreaccount1", HeaderOrder::Ordinal);
    assert!(
        service.contains("x-ms-meta-a_b:2\nx-ms-meta-a0:1\n"),
        "{service}"
    );
    assert!(
        ordinal.contains("x-ms-meta-a0:1\nx-ms-meta-a_b:2\n"),
        "{ordinal}"
    );
}

fn account_sas() -> Sas {
    Sas {
        version: "2026-04-06".into(),
        services: Some("q".into()),
        resource_types: Some("sco".into()),
        permissions: Some("raup".into()),
        start: Some("2024-05-01T00:00:00Z".into()),
        expiry: Some("2024-05-02T00:00:00Z".into()),
        signature: "c/3PC5hSB9oncpy/saTg6EsTGgiKUfnVMAKwxq9tLMY=".into(),
        ..Sas::default()
    }
}

fn queue_sas() -> Sas {
    Sas {
        version: "2026-04-06".into(),
        permissions: Some("rp".into()),
        expiry: Some("2024-05-02T00:00:00Z".into()),
        signature: "Q26w2LEdEiIfy4pFc96wrvoWn+Ow3o1QG7+MY0849MI=".into(),
        ..Sas::default()
    }
}

fn at(iso: &str) -> veil_core::Millis {
    crate::time::parse_iso8601(iso).unwrap()
}

/// Verifies `sas` for a request on `queue` at `now` and authorizes `kind`, as the service does.
fn verify(
    sas: &Sas,
    queue: Option<&str>,
    kind: OperationKind,
    now: veil_core::Millis,
    policy: Option<&SignedIdentifier>,
) -> AzureResult<()> {
    let scope = auth::SasScope {
        account: "devstoreaccount1",
        queue,
        now,
        peer: None,
        policy,
        https: false,
    };
    auth::verify_sas(sas, &dev_key(), &scope)?.authorize(kind)
}

#[test]
fn account_sas_signature_matches_the_known_vector_and_grants_its_permissions() {
    let sas = account_sas();
    let noon = at("2024-05-01T12:00:00Z");
    assert_eq!(
        auth::account_sas_string_to_sign("devstoreaccount1", &sas),
        "devstoreaccount1\nraup\nq\nsco\n2024-05-01T00:00:00Z\n2024-05-02T00:00:00Z\n\n\n2026-04-06\n\n"
    );
    verify(
        &sas,
        Some("orders"),
        OperationKind::PeekMessages,
        noon,
        None,
    )
    .unwrap();
    verify(&sas, Some("orders"), OperationKind::PutMessage, noon, None).unwrap();
    assert_eq!(
        verify(
            &sas,
            Some("orders"),
            OperationKind::ClearMessages,
            noon,
            None
        )
        .unwrap_err()
        .code,
        ErrorCode::AuthorizationPermissionMismatch
    );
    assert_eq!(
        verify(&sas, None, OperationKind::ListQueues, noon, None)
            .unwrap_err()
            .code,
        ErrorCode::AuthorizationPermissionMismatch
    );
}

fn authentication_detail(error: &AzureError) -> &str {
    error
        .details
        .iter()
        .find(|(name, _)| *name == "AuthenticationErrorDetail")
        .map_or("", |(_, value)| value.as_str())
}

#[test]
fn a_sas_outside_its_time_window_says_so_and_a_wrong_signature_says_that() {
    let sas = account_sas();
    let cases = [
        (
            "2024-04-30T23:59:59Z",
            "Signature not valid in the specified time frame: Start [Wed, 01 May 2024 00:00:00 GMT] - \
             Expiry [Thu, 02 May 2024 00:00:00 GMT] - Current [Tue, 30 Apr 2024 23:59:59 GMT]",
        ),
        (
            "2024-05-02T00:00:00Z",
            "Signature not valid in the specified time frame: Start [Wed, 01 May 2024 00:00:00 GMT] - \
             Expiry [Thu, 02 May 2024 00:00:00 GMT] - Current [Thu, 02 May 2024 00:00:00 GMT]",
        ),
    ];
    for (when, expected) in cases {
        let error = verify(
            &sas,
            Some("orders"),
            OperationKind::PeekMessages,
            at(when),
            None,
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::AuthenticationFailed, "{when}");
        assert_eq!(authentication_detail(&error), expected);
    }
    let mut forged = account_sas();
    forged.permissions = Some("raupdl".into());
    let error = verify(
        &forged,
        Some("orders"),
        OperationKind::PeekMessages,
        at("2024-05-01T12:00:00Z"),
        None,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::AuthenticationFailed);
    assert!(
        authentication_detail(&error).starts_with("Signature did not match."),
        "{error:?}"
    );
}

#[test]
fn shared_key_lite_signs_the_verb_three_headers_x_ms_headers_and_the_resource_with_comp_only() {
    let map = headers(&[
        ("x-ms-version", "2026-04-06"),
        ("x-ms-date", DATE),
        ("content-type", "application/xml"),
        ("content-length", "10"),
    ]);
    let request = SignedRequest {
        method: "put",
        path: "/devstoreaccount1/orders",
        query: Some("timeout=30&comp=metadata"),
        headers: &map,
    };
    assert_eq!(
        auth::lite_string_to_sign(&request, "devstoreaccount1", HeaderOrder::Service),
        format!(
            "PUT\n\napplication/xml\n\nx-ms-date:{DATE}\nx-ms-version:2026-04-06\n\
             /devstoreaccount1/devstoreaccount1/orders?comp=metadata"
        )
    );
    let text = auth::lite_string_to_sign(&request, "devstoreaccount1", HeaderOrder::Service);
    let signature = auth::sign(&dev_key(), &text);
    auth::verify_shared_key(
        &request,
        "devstoreaccount1",
        &dev_key(),
        &signature,
        KeyScheme::SharedKeyLite,
    )
    .unwrap();
    let full = auth::sign(
        &dev_key(),
        &auth::string_to_sign(&request, "devstoreaccount1", HeaderOrder::Service),
    );
    let error = auth::verify_shared_key(
        &request,
        "devstoreaccount1",
        &dev_key(),
        &full,
        KeyScheme::SharedKeyLite,
    )
    .unwrap_err();
    assert_eq!(
        error.code,
        ErrorCode::AuthenticationFailed,
        "a Shared Key signature is not a Lite one"
    );
}

#[test]
fn queue_sas_signature_matches_the_known_vector_and_is_bound_to_its_queue_and_permissions() {
    let sas = queue_sas();
    let noon = at("2024-05-01T12:00:00Z");
    assert_eq!(
        auth::queue_sas_string_to_sign("devstoreaccount1", "orders", &sas),
        "rp\n\n2024-05-02T00:00:00Z\n/queue/devstoreaccount1/orders\n\n\n\n2026-04-06"
    );
    verify(
        &sas,
        Some("orders"),
        OperationKind::PeekMessages,
        noon,
        None,
    )
    .unwrap();
    verify(&sas, Some("orders"), OperationKind::GetMessages, noon, None).unwrap();
    assert_eq!(
        verify(&sas, Some("orders"), OperationKind::PutMessage, noon, None)
            .unwrap_err()
            .code,
        ErrorCode::AuthorizationPermissionMismatch
    );
    assert_eq!(
        verify(&sas, Some("other"), OperationKind::PeekMessages, noon, None)
            .unwrap_err()
            .code,
        ErrorCode::AuthenticationFailed,
        "signed for another queue"
    );
}

#[test]
fn a_stored_access_policy_supplies_what_the_sas_leaves_out() {
    let sas = Sas {
        version: "2026-04-06".into(),
        identifier: Some("p1".into()),
        ..Sas::default()
    };
    let expected = auth::queue_sas_string_to_sign("devstoreaccount1", "orders", &sas);
    let sas = Sas {
        signature: auth::sign(&dev_key(), &expected),
        ..sas
    };
    let policy = SignedIdentifier {
        id: "p1".into(),
        start: None,
        expiry: Some("2024-05-02T00:00:00Z".into()),
        permission: Some("a".into()),
    };
    let noon = at("2024-05-01T12:00:00Z");
    verify(
        &sas,
        Some("orders"),
        OperationKind::PutMessage,
        noon,
        Some(&policy),
    )
    .unwrap();
    assert_eq!(
        verify(
            &sas,
            Some("orders"),
            OperationKind::PeekMessages,
            noon,
            Some(&policy)
        )
        .unwrap_err()
        .code,
        ErrorCode::AuthorizationPermissionMismatch
    );
}

/// A queue SAS naming stored policy `p1`, with the given own fields, signed with the development key.
fn policy_sas(start: Option<&str>, expiry: Option<&str>, permissions: Option<&str>) -> Sas {
    let sas = Sas {
        version: "2026-04-06".into(),
        identifier: Some("p1".into()),
        start: start.map(str::to_string),
        expiry: expiry.map(str::to_string),
        permissions: permissions.map(str::to_string),
        ..Sas::default()
    };
    let expected = auth::queue_sas_string_to_sign("devstoreaccount1", "orders", &sas);
    Sas {
        signature: auth::sign(&dev_key(), &expected),
        ..sas
    }
}

#[test]
fn a_sas_may_not_give_a_field_its_stored_access_policy_also_gives() {
    let noon = at("2024-05-01T12:00:00Z");
    let revoked = SignedIdentifier {
        id: "p1".into(),
        start: None,
        expiry: Some("2024-04-01T00:00:00Z".into()),
        permission: None,
    };
    // The revocation: the policy's expiry moved to the past must stop a SAS that carries its own `se`.
    let own_expiry = policy_sas(None, Some("2024-05-02T00:00:00Z"), Some("a"));
    let error = verify(
        &own_expiry,
        Some("orders"),
        OperationKind::PutMessage,
        noon,
        Some(&revoked),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::AuthenticationFailed);
    assert_eq!(
        authentication_detail(&error),
        "Access policy fields can be associated with signature or SAS identifier but not both"
    );
    let policy = SignedIdentifier {
        id: "p1".into(),
        start: Some("2024-05-01T00:00:00Z".into()),
        expiry: None,
        permission: Some("a".into()),
    };
    for (start, permissions) in [(Some("2024-05-01T00:00:00Z"), None), (None, Some("a"))] {
        let both = policy_sas(start, Some("2024-05-02T00:00:00Z"), permissions);
        let error = verify(
            &both,
            Some("orders"),
            OperationKind::PutMessage,
            noon,
            Some(&policy),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::AuthenticationFailed);
    }
    // Split between the two, each field once: allowed.
    let split = policy_sas(None, Some("2024-05-02T00:00:00Z"), None);
    verify(
        &split,
        Some("orders"),
        OperationKind::PutMessage,
        noon,
        Some(&policy),
    )
    .unwrap();
}

#[test]
fn a_sas_and_its_stored_access_policy_must_give_an_expiry_and_permissions_between_them() {
    let noon = at("2024-05-01T12:00:00Z");
    let empty = SignedIdentifier {
        id: "p1".into(),
        start: None,
        expiry: None,
        permission: None,
    };
    let cases = [
        (
            policy_sas(None, None, Some("a")),
            "Signed expiry must be specified in signature or SAS identifier",
        ),
        (
            policy_sas(None, Some("2024-05-02T00:00:00Z"), None),
            "Signed permission must be specified in signature or SAS identifier",
        ),
    ];
    for (sas, detail) in cases {
        let error = verify(
            &sas,
            Some("orders"),
            OperationKind::PutMessage,
            noon,
            Some(&empty),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::AuthenticationFailed);
        assert_eq!(authentication_detail(&error), detail);
    }
}
