//! SigV4 on a raw HTTP request: `veil_sqs::sigv4::parse` (the `Authorization` header, or a presigned query
//! string's `X-Amz-*` parameters) and `verify` (canonical request: path normalisation, query re-encoding,
//! header value folding; the signing key; the clock rules).
//!
//! Beyond "no panic": a claim the parser accepted, re-signed with the secret over its own canonical request
//! (`signature_of`, with the payload hash the verifier picks), verifies at the moment of its own timestamp —
//! the canonical request is a pure function of the request, so signer and verifier always agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sha2::Digest;
use time::macros::format_description;
use time::PrimitiveDateTime;
use veil_fuzz::RawRequest;
use veil_sqs::sigv4::{self, Carrier, SigV4Error, SignedRequest, SERVICE, UNSIGNED_PAYLOAD};

/// Hex SHA-256, as the verifier hashes a payload.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

fuzz_target!(|data: &[u8]| {
    let Some(request) = RawRequest::parse(data) else {
        return;
    };
    let signed = SignedRequest {
        method: request.method,
        path: request.path,
        query: request.query,
        headers: &request.headers,
        body: request.body,
    };
    let Ok(mut claim) = sigv4::parse(&signed) else {
        return;
    };
    // Whatever it claims, a wrong signature is refused and nothing panics at any time.
    for now in [0, 1_700_000_000_000, u64::MAX] {
        let _ = sigv4::verify(&signed, &claim, SECRET, &sigv4::SigningKeys::default(), now);
    }

    let Ok(signed_at) = PrimitiveDateTime::parse(
        &claim.timestamp,
        format_description!("[year][month][day]T[hour][minute][second]Z"),
    ) else {
        return;
    };
    let Ok(signed_at) = u64::try_from(signed_at.assume_utc().unix_timestamp()) else {
        return;
    };
    if claim.service != SERVICE || !claim.timestamp.starts_with(&claim.scope_date) {
        return;
    }
    let payload = match (claim.carrier, request.header("x-amz-content-sha256")) {
        (Carrier::Header, Some(UNSIGNED_PAYLOAD)) => UNSIGNED_PAYLOAD.to_string(),
        _ => sha256_hex(request.body),
    };
    claim.signature = sigv4::signature_of(&signed, &claim, SECRET, &payload);
    let verdict = sigv4::verify(
        &signed,
        &claim,
        SECRET,
        &sigv4::SigningKeys::default(),
        signed_at * 1_000,
    );
    assert!(
        !matches!(
            verdict,
            Err(SigV4Error::Mismatch(_) | SigV4Error::Incomplete(_))
        ),
        "a correctly signed claim is refused: {verdict:?}\n{claim:?}"
    );
});
