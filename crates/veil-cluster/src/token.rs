//! The credential of the internal RPC: an HMAC of a fixed label under the cluster's shared secret (the one
//! PostgreSQL holds for every node, `veil_postgres::secret`), sent in a header with every call. A process that
//! reaches the internal port without the database's secret cannot call the engine. With TLS between the nodes
//! (crate::tls) it travels only inside TLS and is defence in depth behind the node certificates
//! (docs/cluster.md "TLS between nodes").

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The header every internal call carries its token in.
pub const HEADER: &str = "x-veil-cluster-token";
/// What the token authenticates; changing it makes nodes of different versions refuse each other.
const LABEL: &[u8] = b"veil cluster rpc v1";

/// A node's token, as the header carries it.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn of(secret: &[u8]) -> Self {
        // Any key length is valid for HMAC: `new_from_slice` cannot fail here.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(LABEL);
        Self(hex::encode(mac.finalize().into_bytes()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token, in time independent of where they differ.
    pub fn admits(&self, presented: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(presented).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_secret_gives_the_same_token() {
        let token = Token::of(&[1; 32]);
        assert!(token.admits(Token::of(&[1; 32]).as_str().as_bytes()));
        assert!(!token.admits(Token::of(&[2; 32]).as_str().as_bytes()));
        assert!(!token.admits(b""));
    }
}
