//! The credential of the internal RPC: an HMAC of a fixed label under a key of the cluster, sent in a header
//! with every call. A process that reaches the internal port without the database's keys cannot call the
//! engine. With TLS between the nodes (crate::tls) it travels only inside TLS and is defence in depth behind
//! the node certificates (docs/cluster.md "TLS between nodes").
//!
//! The key rotates without downtime (docs/cluster.md "Rotating the cluster token"): [`Tokens`] is what a node
//! sends and accepts now, one key sent and at most two accepted while a rotation is under way; the node's lease
//! loop sets it from the database every round. This crate decides nothing about when a key changes.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use parking_lot::RwLock;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tonic::metadata::{Ascii, MetadataValue};

/// The header every internal call carries its token in.
pub const HEADER: &str = "x-veil-cluster-token";
/// What the token authenticates; changing it makes nodes of different versions refuse each other.
const LABEL: &[u8] = b"veil cluster rpc v1";

/// One key's token, as the header carries it.
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

    fn header(&self) -> MetadataValue<Ascii> {
        // Hex digits only: always a valid header value.
        MetadataValue::try_from(self.0.as_str())
            .unwrap_or_else(|_| unreachable!("a hex string is a header value"))
    }
}

/// The tokens a node sends and accepts now; shared by its client side (every peer) and its server side.
/// Cheap to clone; clones see every change.
#[derive(Clone)]
pub struct Tokens {
    inner: Arc<RwLock<Ring>>,
}

struct Ring {
    sends_generation: u64,
    sends: MetadataValue<Ascii>,
    /// `(generation, token)`, the sent one among them.
    accepts: Vec<(u64, Token)>,
}

impl Tokens {
    /// Generation 0 alone: `secret` sent and accepted.
    pub fn new(secret: &[u8]) -> Self {
        let token = Token::of(secret);
        Self {
            inner: Arc::new(RwLock::new(Ring {
                sends_generation: 0,
                sends: token.header(),
                accepts: vec![(0, token)],
            })),
        }
    }

    /// Sends the key of generation `sends.0` from now on and accepts those of `accepts` (`(generation, key)`).
    /// Returns whether anything changed.
    pub fn set<'a>(
        &self,
        sends: (u64, &[u8]),
        accepts: impl IntoIterator<Item = (u64, &'a [u8])>,
    ) -> bool {
        let accepts: Vec<(u64, &[u8])> = accepts.into_iter().collect();
        {
            let ring = self.inner.read();
            let same = ring.sends_generation == sends.0
                && ring.accepts.len() == accepts.len()
                && ring
                    .accepts
                    .iter()
                    .zip(&accepts)
                    .all(|((known, _), (given, _))| known == given);
            if same {
                return false;
            }
        }
        let ring = Ring {
            sends_generation: sends.0,
            sends: Token::of(sends.1).header(),
            accepts: accepts
                .into_iter()
                .map(|(generation, secret)| (generation, Token::of(secret)))
                .collect(),
        };
        *self.inner.write() = ring;
        true
    }

    /// The header value every call to a peer carries now.
    pub fn header(&self) -> MetadataValue<Ascii> {
        self.inner.read().sends.clone()
    }

    /// The generation sent now.
    pub fn sends_generation(&self) -> u64 {
        self.inner.read().sends_generation
    }

    /// The generations accepted now, as set.
    pub fn accepted_generations(&self) -> Vec<u64> {
        let ring = self.inner.read();
        ring.accepts
            .iter()
            .map(|(generation, _)| *generation)
            .collect()
    }

    /// Whether `presented` is a token accepted now. Every accepted token is compared, so the time taken says
    /// nothing about which one matched.
    pub fn admits(&self, presented: &[u8]) -> bool {
        let ring = self.inner.read();
        ring.accepts.iter().fold(false, |admitted, (_, token)| {
            token.admits(presented) | admitted
        })
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

    #[test]
    fn during_a_rotation_both_keys_are_accepted_and_after_it_only_the_new_one() {
        let tokens = Tokens::new(&[1; 32]);
        let old = Token::of(&[1; 32]);
        let new = Token::of(&[2; 32]);
        assert!(tokens.admits(old.as_str().as_bytes()));
        assert!(!tokens.admits(new.as_str().as_bytes()));
        assert!(tokens.set((0, &[1; 32]), [(0, &[1; 32][..]), (1, &[2; 32][..])]));
        assert!(tokens.admits(old.as_str().as_bytes()) && tokens.admits(new.as_str().as_bytes()));
        assert_eq!(
            tokens.header(),
            old.header(),
            "announced keys are not sent yet"
        );
        assert!(tokens.set((1, &[2; 32]), [(0, &[1; 32][..]), (1, &[2; 32][..])]));
        assert_eq!(tokens.header(), new.header());
        assert!(tokens.set((1, &[2; 32]), [(1, &[2; 32][..])]));
        assert!(
            !tokens.admits(old.as_str().as_bytes()),
            "the retired key still opens the port"
        );
        assert!(tokens.admits(new.as_str().as_bytes()));
        assert!(
            !tokens.set((1, &[2; 32]), [(1, &[2; 32][..])]),
            "nothing changed"
        );
    }
}
