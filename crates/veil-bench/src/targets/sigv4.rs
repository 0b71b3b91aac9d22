//! SigV4 signing of veil-bench's SQS requests, as an SDK signs them: every request is signed (header
//! `Authorization`, service `sqs`), so that Veil's verification is part of what the benchmark measures
//! (docs/benchmarks.md, "SigV4 on vs off"). A client of its own, independent of Veil's verifier, so that a
//! shared mistake cannot pass unnoticed. Only what a JSON-protocol POST to `/` needs: no query, path `/`.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

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

/// `YYYYMMDDTHHMMSSZ` of a Unix time in seconds (Hinnant's `civil_from_days`).
fn amz_date(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let rem = unix_s % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
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
