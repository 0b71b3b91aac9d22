//! SigV4 signing of veil-bench's SQS requests, as an SDK signs them: every request is signed (header
//! `Authorization`, service `sqs`), so that Veil's verification is part of what the benchmark measures
//! (docs/benchmarks.md, "SigV4 on vs off"). A client of its own, independent of Veil's verifier, so that a
//! shared mistake cannot pass unnoticed. Only what a JSON-protocol POST to `/` needs: no query, path `/`.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use time::macros::format_description;

/// The development credential (`test`/`test`) every SQS emulator accepts, Veil's included.
pub const ACCESS_KEY: &str = "test";
pub const SECRET_KEY: &str = "test";
pub const REGION: &str = "us-east-1";

/// The headers of one signed request: `x-amz-date` and `authorization`.
pub struct Signature {
    pub amz_date: String,
    pub authorization: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time in seconds.
fn amz_date(unix_s: u64) -> String {
    let format = format_description!("[year][month][day]T[hour][minute][second]Z");
    i64::try_from(unix_s)
        .ok()
        .and_then(|seconds| time::OffsetDateTime::from_unix_timestamp(seconds).ok())
        .and_then(|time| time.format(format).ok())
        .unwrap_or_default()
}

/// Signs a POST to `/` with the headers `content-type`, `host` and `x-amz-target` and `body`, now.
pub fn sign(host: &str, content_type: &str, target: &str, body: &[u8]) -> Signature {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    sign_at(now, host, content_type, target, body)
}

fn sign_at(unix_s: u64, host: &str, content_type: &str, target: &str, body: &[u8]) -> Signature {
    let amz_date = amz_date(unix_s);
    let date = &amz_date[..8];
    let signed_headers = "content-type;host;x-amz-date;x-amz-target";
    let canonical = format!(
        "POST\n/\n\ncontent-type:{content_type}\nhost:{host}\nx-amz-date:{amz_date}\nx-amz-target:{target}\n\n{signed_headers}\n{}",
        hex(&Sha256::digest(body))
    );
    let scope = format!("{date}/{REGION}/sqs/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{SECRET_KEY}").as_bytes(), date.as_bytes());
    for part in [REGION, "sqs", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex(&hmac(&key, to_sign.as_bytes()));
    Signature {
        authorization: format!(
            "AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
        ),
        amz_date,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_iso_8601_basic() {
        assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
    }

    #[test]
    fn signatures_are_stable_for_one_instant_and_cover_the_body() {
        let a = sign_at(
            1_440_938_160,
            "h:1",
            "application/x-amz-json-1.0",
            "AmazonSQS.ListQueues",
            b"{}",
        );
        let b = sign_at(
            1_440_938_160,
            "h:1",
            "application/x-amz-json-1.0",
            "AmazonSQS.ListQueues",
            b"{ }",
        );
        assert!(a.authorization.starts_with(
            "AWS4-HMAC-SHA256 Credential=test/20150830/us-east-1/sqs/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature="
        ));
        assert_ne!(a.authorization, b.authorization);
    }
}
