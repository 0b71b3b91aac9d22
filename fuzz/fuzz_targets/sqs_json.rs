//! The SQS JSON protocol decoder (`veil_sqs::codec::decode` with an `X-Amz-Target`, i.e. `codec::json`) on a
//! raw HTTP request, then the service's pure checks on what it decoded.
//!
//! Beyond "no panic": decoding depends on the JSON value only, not its layout — the same body with whitespace
//! around it decodes to the same action or the same error; and an error answer is a JSON object whose
//! `__type` names the error's code, with the `x-amzn-query-error` header boto3 reads
//! whenever the code has a Query name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use veil_fuzz::{check_sqs_action, RawRequest};
use veil_sqs::codec::{self, HttpRequestParts};

fuzz_target!(|data: &[u8]| {
    let Some(request) = RawRequest::parse(data) else {
        return;
    };
    // Without a target the request is the Query protocol's (the sqs_query target's).
    let Some(target) = request.header("x-amz-target") else {
        return;
    };
    let parts = HttpRequestParts {
        method: request.method,
        query: request.query,
        target: Some(target),
        body: request.body,
    };
    let (protocol, decoded) = codec::decode(&parts);
    assert_eq!(protocol, veil_sqs::api::Protocol::Json);

    let mut padded = b" \n\t".to_vec();
    padded.extend_from_slice(request.body);
    padded.extend_from_slice(b"\r\n ");
    let (_, again) = codec::decode(&HttpRequestParts {
        body: &padded,
        ..parts
    });
    match (&decoded, &again) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "whitespace around the body changed the action"),
        (Err(a), Err(b)) => assert_eq!(
            a.code, b.code,
            "whitespace around the body changed the error"
        ),
        _ => panic!("whitespace around the body changed the outcome: {decoded:?} vs {again:?}"),
    }

    match decoded {
        Ok(request) => check_sqs_action(&request.action),
        Err(error) => {
            let reply = codec::encode_error(protocol, &error, "fuzz-request");
            let body: serde_json::Value =
                serde_json::from_slice(&reply.body).expect("an error answer is JSON");
            let named = body["__type"].as_str().expect("an error answer has __type");
            assert!(
                named.ends_with(error.code.aws_code()),
                "{named} vs {:?}",
                error.code
            );
            let query_error = reply
                .headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("x-amzn-query-error"));
            assert_eq!(
                query_error,
                error.code.has_query_code(),
                "x-amzn-query-error"
            );
        }
    }
});
