//! The `SenderId` a message shows its receivers: for a signed sender, an opaque id of its credential in the
//! shape of an IAM user's unique id (`AIDA` and 17 upper-case letters and digits), never the access key
//! itself, which is half of a credential and must not reach another account that reads the queue (issue 44,
//! item 7; docs/security.md "SQS sender ids"). AWS shows the principal's unique id the same way.
//!
//! The id is a keyed hash of the access key under the server's secret (the one that keys receipts, kept in
//! the data directory, or a cluster's in its database): the same key gives the same id across restarts and on
//! every node of a cluster, different keys give different ids, and the id tells nothing of the key to whoever
//! does not hold the secret.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What every id starts with: AWS's prefix of an IAM user's unique id.
const PREFIX: &str = "AIDA";
/// The characters after the prefix, as in AWS's ids (21 in all).
const SUFFIX_CHARS: usize = 17;
/// The characters of the suffix (RFC 4648's base32 alphabet: upper-case letters and the digits 2–7), 5 bits each.
const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
/// Separates this use of the secret from its others (receipts, delegation keys, the cluster token).
const DOMAIN: &[u8] = b"veil sqs sender id v1\0";

/// Derives sender ids; those of the configured credentials are derived once, up front.
#[derive(Clone)]
pub struct SenderIds {
    /// HMAC-SHA256 keyed with the secret and already fed [`DOMAIN`].
    keyed: Hmac<Sha256>,
    known: HashMap<String, String>,
}

impl std::fmt::Debug for SenderIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SenderIds(..)")
    }
}

impl SenderIds {
    pub fn new<'a>(secret: &[u8], access_keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut keyed =
            <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC accepts any key length");
        keyed.update(DOMAIN);
        let mut ids = Self {
            keyed,
            known: HashMap::new(),
        };
        for key in access_keys {
            let id = ids.derive(key);
            ids.known.insert(key.to_string(), id);
        }
        ids
    }

    /// The sender id of `access_key`.
    pub fn of(&self, access_key: &str) -> String {
        match self.known.get(access_key) {
            Some(id) => id.clone(),
            // Only with authentication off, where any key is taken unverified.
            None => self.derive(access_key),
        }
    }

    fn derive(&self, access_key: &str) -> String {
        let mut mac = self.keyed.clone();
        mac.update(access_key.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut id = String::with_capacity(PREFIX.len() + SUFFIX_CHARS);
        id.push_str(PREFIX);
        // 17 × 5 = 85 bits of the digest, read from the front.
        let mut bits = 0u32;
        let mut held = 0u32;
        let mut bytes = digest.iter();
        while id.len() < PREFIX.len() + SUFFIX_CHARS {
            if held < 5 {
                bits = (bits << 8) | u32::from(*bytes.next().unwrap_or(&0));
                held += 8;
            }
            held -= 5;
            id.push(char::from(ALPHABET[((bits >> held) & 0x1F) as usize]));
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aws_shaped(id: &str) -> bool {
        id.len() == 21
            && id.starts_with("AIDA")
            && id[4..]
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    }

    #[test]
    fn an_id_has_the_shape_of_an_iam_users_unique_id_and_hides_the_key() {
        let ids = SenderIds::new(b"secret", ["AKIAEXAMPLE"]);
        let id = ids.of("AKIAEXAMPLE");
        assert!(aws_shaped(&id), "{id}");
        assert!(!id.contains("AKIAEXAMPLE"));
    }

    #[test]
    fn an_id_depends_on_the_key_and_the_secret_alone() {
        let ids = SenderIds::new(b"secret", ["A"]);
        let again = SenderIds::new(b"secret", []);
        assert_eq!(ids.of("A"), again.of("A"), "known or derived on demand");
        assert_ne!(ids.of("A"), ids.of("B"));
        assert_ne!(ids.of("A"), SenderIds::new(b"other", []).of("A"));
        for key in ["", "B", "a much longer access key than any real one"] {
            assert!(aws_shaped(&ids.of(key)), "{key:?}");
        }
    }
}
