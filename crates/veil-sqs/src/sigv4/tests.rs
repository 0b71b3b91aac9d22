//! The verifier on bytes: AWS's published SigV4 test-suite vectors (service `service`, key `AKIDEXAMPLE`)
//! and the IAM example of AWS's signing guide, then the refusals.

use axum::http::{HeaderMap, HeaderValue};

use super::*;

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const SUITE_DATE: &str = "20150830T123600Z";

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

fn claim(service: &str, signed: &[&str], carrier: Carrier) -> Claim {
    Claim {
        access_key: "AKIDEXAMPLE".into(),
        scope_date: "20150830".into(),
        region: "us-east-1".into(),
        service: service.into(),
        signed_headers: signed.iter().map(|s| s.to_string()).collect(),
        signature: String::new(),
        timestamp: SUITE_DATE.into(),
        security_token: None,
        carrier,
    }
}

fn empty_hash() -> String {
    hex::encode(Sha256::digest(b""))
}

#[test]
fn test_suite_get_vanilla() {
    let h = headers(&[
        ("host", "example.amazonaws.com"),
        ("x-amz-date", SUITE_DATE),
    ]);
    let request = SignedRequest {
        method: "GET",
        path: "/",
        query: None,
        headers: &h,
        body: b"",
    };
    let c = claim("service", &["host", "x-amz-date"], Carrier::Header);
    assert_eq!(
        signature_of(&request, &c, SECRET, &empty_hash()),
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
}

#[test]
fn test_suite_get_vanilla_query_order_key_case() {
    let h = headers(&[
        ("host", "example.amazonaws.com"),
        ("x-amz-date", SUITE_DATE),
    ]);
    let request = SignedRequest {
        method: "GET",
        path: "/",
        query: Some("Param2=value2&Param1=value1"),
        headers: &h,
        body: b"",
    };
    let c = claim("service", &["host", "x-amz-date"], Carrier::Header);
    assert_eq!(
        signature_of(&request, &c, SECRET, &empty_hash()),
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
    );
}

#[test]
fn signing_guide_iam_list_users_example() {
    let h = headers(&[
        ("host", "iam.amazonaws.com"),
        (
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        ),
        ("x-amz-date", SUITE_DATE),
    ]);
    let request = SignedRequest {
        method: "GET",
        path: "/",
        query: Some("Action=ListUsers&Version=2010-05-08"),
        headers: &h,
        body: b"",
    };
    let c = claim(
        "iam",
        &["content-type", "host", "x-amz-date"],
        Carrier::Header,
    );
    assert_eq!(
        signature_of(&request, &c, SECRET, &empty_hash()),
        "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
    );
}

#[test]
fn canonical_uri_and_query_encode_as_the_sdks_do() {
    assert_eq!(canonical_uri(""), "/");
    assert_eq!(canonical_uri("/a/./b/../c/"), "/a/c/");
    assert_eq!(
        canonical_uri("/000000000000/q%20x"),
        "/000000000000/q%2520x"
    );
    assert_eq!(
        canonical_query("b=2&a=%7e+x&a=1&X-Amz-Signature=s", true),
        "a=1&a=~%2Bx&b=2"
    );
    assert_eq!(canonical_query("", false), "");
    let mut collapsed = String::from("x:");
    push_collapsed(&mut collapsed, "  a   b \t c ");
    assert_eq!(collapsed, "x:a b c");
}

#[test]
fn amz_dates_convert_both_ways() {
    let millis = amz_to_millis(SUITE_DATE).unwrap();
    assert_eq!(millis, 1_440_938_160_000);
    assert_eq!(millis_to_amz(millis), SUITE_DATE);
    assert_eq!(amz_to_millis("20150830T1236Z"), None);
    assert_eq!(amz_to_millis("2015083OT123600Z"), None);
    assert_eq!(
        http_date_to_amz("Sun, 30 Aug 2015 12:36:00 GMT").as_deref(),
        Some(SUITE_DATE)
    );
}

/// A request signed for SQS the way the SDKs sign it, and the header that carries the signature.
fn signed_sqs(body: &'static [u8], at: &str) -> (HeaderMap, String) {
    let mut h = headers(&[
        ("host", "localhost:9324"),
        ("x-amz-date", at),
        ("content-type", "application/x-amz-json-1.0"),
    ]);
    let mut c = claim(
        "sqs",
        &["content-type", "host", "x-amz-date"],
        Carrier::Header,
    );
    c.timestamp = at.into();
    c.scope_date = at[..8].into();
    let request = SignedRequest {
        method: "POST",
        path: "/",
        query: None,
        headers: &h,
        body,
    };
    let signature = signature_of(&request, &c, "test", &hex::encode(Sha256::digest(body)));
    let authorization = format!(
        "AWS4-HMAC-SHA256 Credential=test/{}/us-east-1/sqs/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature={signature}",
        &at[..8]
    );
    h.insert(
        "authorization",
        HeaderValue::from_str(&authorization).unwrap(),
    );
    (h, signature)
}

fn check(h: &HeaderMap, body: &[u8], secret: &str, now: Millis) -> Result<Claim, SigV4Error> {
    let request = SignedRequest {
        method: "POST",
        path: "/",
        query: None,
        headers: h,
        body,
    };
    let claim = parse(&request)?;
    verify(&request, &claim, secret, &SigningKeys::default(), now)?;
    Ok(claim)
}

#[test]
fn a_signed_request_verifies_and_names_its_key_and_region() {
    let now = amz_to_millis(SUITE_DATE).unwrap();
    let (h, _) = signed_sqs(b"{}", SUITE_DATE);
    let claim = check(&h, b"{}", "test", now).unwrap();
    assert_eq!(
        (claim.access_key.as_str(), claim.region.as_str()),
        ("test", "us-east-1")
    );
}

#[test]
fn tampering_with_body_header_or_secret_is_a_mismatch() {
    let now = amz_to_millis(SUITE_DATE).unwrap();
    let (h, _) = signed_sqs(b"{}", SUITE_DATE);
    let mismatch = Err(SigV4Error::Mismatch(MISMATCH_MESSAGE.into()));
    assert_eq!(check(&h, b"{ }", "test", now), mismatch);
    assert_eq!(check(&h, b"{}", "other", now), mismatch);
    let mut tampered = h.clone();
    tampered.insert("content-type", HeaderValue::from_static("text/plain"));
    assert_eq!(check(&tampered, b"{}", "test", now), mismatch);
}

#[test]
fn a_cached_signing_key_serves_only_its_own_secret() {
    let now = amz_to_millis(SUITE_DATE).unwrap();
    let (h, _) = signed_sqs(b"{}", SUITE_DATE);
    let request = SignedRequest {
        method: "POST",
        path: "/",
        query: None,
        headers: &h,
        body: b"{}",
    };
    let claim = parse(&request).unwrap();
    let keys = SigningKeys::default();
    assert_eq!(verify(&request, &claim, "test", &keys, now), Ok(()));
    // Verified again from the cache, then refused under another secret with the same scope.
    assert_eq!(verify(&request, &claim, "test", &keys, now), Ok(()));
    assert_eq!(
        verify(&request, &claim, "other", &keys, now),
        Err(SigV4Error::Mismatch(MISMATCH_MESSAGE.into()))
    );
    assert_eq!(verify(&request, &claim, "test", &keys, now), Ok(()));
}

#[test]
fn a_date_more_than_15_minutes_off_is_expired_or_not_yet_current() {
    let now = amz_to_millis(SUITE_DATE).unwrap();
    let (h, _) = signed_sqs(b"{}", SUITE_DATE);
    assert!(check(&h, b"{}", "test", now + 14 * 60_000).is_ok());
    assert_eq!(
        check(&h, b"{}", "test", now + 16 * 60_000),
        Err(SigV4Error::Mismatch(
            "Signature expired: 20150830T123600Z is now earlier than 20150830T123700Z (20150830T125200Z - 15 min.)"
                .into()
        ))
    );
    assert_eq!(
        check(&h, b"{}", "test", now - 16 * 60_000),
        Err(SigV4Error::Mismatch(
            "Signature not yet current: 20150830T123600Z is still later than 20150830T123500Z (20150830T122000Z + 15 min.)"
                .into()
        ))
    );
}

#[test]
fn missing_and_malformed_signatures_are_told_apart() {
    let none = HeaderMap::new();
    assert_eq!(check(&none, b"", "test", 0), Err(SigV4Error::Missing));
    let h = headers(&[
        ("host", "x"),
        (
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20150830/us-east-1/sqs/aws4_request",
        ),
    ]);
    match check(&h, b"", "test", 0) {
        Err(SigV4Error::Incomplete(message)) => {
            assert!(message.starts_with("Authorization header requires 'Signature' parameter. Authorization header requires 'SignedHeaders' parameter. Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let basic = headers(&[("authorization", "Basic dGVzdDp0ZXN0")]);
    assert!(matches!(
        check(&basic, b"", "test", 0),
        Err(SigV4Error::Incomplete(_))
    ));
}

#[test]
fn presigned_query_strings_verify_until_they_expire() {
    let at = SUITE_DATE;
    let h = headers(&[("host", "localhost:9324")]);
    let unsigned_query = format!(
        "Action=ListQueues&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=test%2F20150830%2Fus-east-1%2Fsqs%2Faws4_request&X-Amz-Date={at}&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
    );
    let request = SignedRequest {
        method: "GET",
        path: "/",
        query: Some(&unsigned_query),
        headers: &h,
        body: b"",
    };
    let c = claim("sqs", &["host"], Carrier::Query { expires_s: 60 });
    let signature = signature_of(&request, &c, "test", &empty_hash());
    let query = format!("{unsigned_query}&X-Amz-Signature={signature}");
    let request = SignedRequest {
        query: Some(&query),
        ..request
    };
    let parsed = parse(&request).unwrap();
    assert_eq!(parsed.carrier, Carrier::Query { expires_s: 60 });
    let now = amz_to_millis(at).unwrap();
    let keys = SigningKeys::default();
    let verify_at = |millis| verify(&request, &parsed, "test", &keys, millis);
    assert_eq!(verify_at(now + 59_000), Ok(()));
    assert_eq!(verify_at(now + 61_000), Err(SigV4Error::Expired));
    let tampered = query.replace("ListQueues", "CreateQueue");
    let request = SignedRequest {
        query: Some(&tampered),
        ..request
    };
    assert_eq!(
        verify(&request, &parsed, "test", &SigningKeys::default(), now),
        Err(SigV4Error::Mismatch(MISMATCH_MESSAGE.into()))
    );
}

/// A presigned GET of `Action=GetQueueUrl` signed over `signed` headers and `payload_hash`, then sent with
/// `extra` headers and `body`: the verdict.
fn presigned_verdict(
    signed: &[&str],
    payload_hash: &str,
    extra: &[(&'static str, &str)],
    body: &[u8],
) -> Result<(), SigV4Error> {
    let at = SUITE_DATE;
    let list = signed.join("%3B");
    let unsigned_query = format!(
        "Action=GetQueueUrl&QueueName=q&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=test%2F20150830%2Fus-east-1%2Fsqs%2Faws4_request&X-Amz-Date={at}&X-Amz-Expires=60&X-Amz-SignedHeaders={list}"
    );
    let mut pairs = vec![("host", "localhost:9324")];
    pairs.extend(
        extra
            .iter()
            .filter(|(name, _)| signed.contains(name))
            .copied(),
    );
    let signing = SignedRequest {
        method: "POST",
        path: "/",
        query: Some(&unsigned_query),
        headers: &headers(&pairs),
        body,
    };
    let c = claim("sqs", signed, Carrier::Query { expires_s: 60 });
    let signature = signature_of(&signing, &c, "test", payload_hash);
    let query = format!("{unsigned_query}&X-Amz-Signature={signature}");
    let mut sent = vec![("host", "localhost:9324")];
    sent.extend(extra.iter().copied());
    let sent = headers(&sent);
    let request = SignedRequest {
        method: "POST",
        path: "/",
        query: Some(&query),
        headers: &sent,
        body,
    };
    let parsed = parse(&request)?;
    verify(
        &request,
        &parsed,
        "test",
        &SigningKeys::default(),
        amz_to_millis(at).unwrap(),
    )
}

#[test]
fn a_presigned_request_may_not_add_an_unsigned_target_or_body() {
    let target = [("x-amz-target", "AmazonSQS.PurgeQueue")];
    let body = br#"{"QueueUrl":"http://localhost:9324/000000000000/q"}"#;
    // As botocore presigns: UNSIGNED-PAYLOAD, only `host` signed.
    assert_eq!(
        presigned_verdict(&["host"], UNSIGNED_PAYLOAD, &[], b""),
        Ok(())
    );
    assert_eq!(
        presigned_verdict(&["host"], UNSIGNED_PAYLOAD, &target, b""),
        Err(SigV4Error::Unsigned(UnsignedPart::Target))
    );
    assert_eq!(
        presigned_verdict(
            &["host"],
            UNSIGNED_PAYLOAD,
            &[],
            b"QueueOwnerAWSAccountId=1"
        ),
        Err(SigV4Error::Unsigned(UnsignedPart::Body))
    );
    // What the signature covers may be sent: a signed target, a body whose hash was signed.
    assert_eq!(
        presigned_verdict(&["host", "x-amz-target"], UNSIGNED_PAYLOAD, &target, b""),
        Ok(())
    );
    let body_hash = hex::encode(Sha256::digest(body));
    assert_eq!(
        presigned_verdict(&["host", "x-amz-target"], &body_hash, &target, body),
        Ok(())
    );
    assert_eq!(
        presigned_verdict(&["host", "x-amz-target"], UNSIGNED_PAYLOAD, &target, body),
        Err(SigV4Error::Unsigned(UnsignedPart::Body))
    );
}

#[test]
fn a_header_signed_request_may_not_add_an_unsigned_target() {
    // signed_sqs signs content-type, host and x-amz-date only: a target added to it is not covered.
    let now = amz_to_millis(SUITE_DATE).unwrap();
    let (mut h, _) = signed_sqs(b"{}", SUITE_DATE);
    assert!(check(&h, b"{}", "test", now).is_ok());
    h.insert(
        "x-amz-target",
        HeaderValue::from_static("AmazonSQS.PurgeQueue"),
    );
    assert_eq!(
        check(&h, b"{}", "test", now),
        Err(SigV4Error::Unsigned(UnsignedPart::Target))
    );
}

#[test]
fn a_scope_for_another_service_is_refused() {
    let h = headers(&[("host", "x"), ("x-amz-date", SUITE_DATE)]);
    let request = SignedRequest {
        method: "GET",
        path: "/",
        query: None,
        headers: &h,
        body: b"",
    };
    let c = claim("s3", &["host"], Carrier::Header);
    assert_eq!(
        verify(
            &request,
            &c,
            "test",
            &SigningKeys::default(),
            amz_to_millis(SUITE_DATE).unwrap()
        ),
        Err(SigV4Error::Mismatch(
            "Credential should be scoped to correct service: 'sqs'. ".into()
        ))
    );
}

#[test]
fn amz_timestamps_round_trip_and_impossible_dates_are_refused() {
    assert_eq!(amz_to_millis("20150830T123600Z"), Some(1_440_938_160_000));
    assert_eq!(millis_to_amz(1_440_938_160_000), "20150830T123600Z");
    assert_eq!(amz_to_millis("20150231T123600Z"), None);
    assert_eq!(amz_to_millis("20150830T246000Z"), None);
    assert_eq!(amz_to_millis("20150830 123600Z"), None);
    assert_eq!(amz_to_millis("20150830T123600"), None);
}

#[test]
fn a_scope_region_outside_awss_shape_is_refused_without_quoting_its_bytes() {
    for region in [
        "us\0east-1",
        "eu-west-1\n",
        "US-EAST-1",
        "-us",
        "us-",
        "a b",
    ] {
        let scope = format!("AKID/20240101/{region}/sqs/aws4_request");
        match parse_scope(&scope) {
            Err(SigV4Error::Mismatch(message)) => {
                assert!(
                    message.starts_with("Credential should be scoped to a valid region, not '"),
                    "{message}"
                );
                assert!(message.chars().all(|c| !c.is_control()), "{message:?}");
            }
            other => panic!("{region:?}: {:?}", other.err()),
        }
    }
    for region in [
        "us-east-1",
        "us-gov-west-1",
        "us-isob-east-1",
        "eu-central-2",
    ] {
        let scope = format!("AKID/20240101/{region}/sqs/aws4_request");
        assert!(parse_scope(&scope).is_ok(), "{region}");
    }
}
