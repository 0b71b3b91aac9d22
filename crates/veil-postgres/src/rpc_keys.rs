//! The keys of the cluster's internal RPC token, and their rotation without downtime (docs/cluster.md
//! "Rotating the cluster token"). Generation 0 is the cluster's shared secret itself (`crate::secret`), so a
//! cluster that never rotated, and nodes of the version before rotation existed, agree on it. A rotation adds
//! generation n+1 with a fresh random key and a schedule in the database's time:
//!
//! - from the rotation until `sends_from_ms` (one step later) every node accepts n and n+1 and still sends n:
//!   each node reads the keys every round, well within a step, so every node accepts n+1 before anyone sends it;
//! - from `sends_from_ms` until `previous_until_ms` (one more step) every node sends n+1 and still accepts n,
//!   from a node that has not read the keys since;
//! - after it, n is refused: a token captured before the rotation opens nothing.
//!
//! So at most two keys are ever accepted, and a rotation under way refuses the next one. The rows live in
//! `veil_meta` (`rpc_key/<generation>`), not a table of their own, so that the schema is unchanged and an older
//! binary still opens the database; only the newest generations matter, and a rotation deletes the ones that
//! can no longer be accepted.

use tokio_postgres::{Client, GenericClient};
use veil_core::StoreError;

use crate::connect::db_error;
use crate::secret::SECRET_BYTES;

/// The key prefix of the rows in `veil_meta`.
const KEY_PREFIX: &str = "rpc_key/";
/// The advisory lock that makes concurrent rotations take turns.
const ROTATION_LOCK: i64 = 7_413_370_002;
/// The shortest step a rotation may take: a node reads the keys once a round (at most a quarter of a lease
/// term, half a second by default), and every node must have read a new key before anyone sends it.
pub const ROTATION_STEP_S_MIN: u64 = 2;
/// The default step: far above any round, so a node whose database calls stall for a while still keeps up.
pub const ROTATION_STEP_S_DEFAULT: u64 = 30;
/// A step beyond this is a typo, not a plan (a day).
pub const ROTATION_STEP_S_MAX: u64 = 86_400;

/// One generation of the token's key and its schedule, in the database's milliseconds since the epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcKey {
    pub generation: u64,
    pub secret: [u8; SECRET_BYTES],
    /// From when nodes send this generation's token (before it, they only accept it).
    pub sends_from_ms: u64,
    /// Until when nodes still accept the generation before this one.
    pub previous_until_ms: u64,
}

/// Which keys a node sends and accepts at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeysInForce {
    /// The generation sent with every call.
    pub sends: RpcKey,
    /// Every generation a call may present, `sends` among them; at most two.
    pub accepts: Vec<RpcKey>,
}

impl KeysInForce {
    /// The keys in force at `now_ms` among generation 0 (`shared_secret`) and `rotated`.
    pub fn at(now_ms: u64, shared_secret: [u8; SECRET_BYTES], rotated: &[RpcKey]) -> Self {
        let mut keys = vec![RpcKey {
            generation: 0,
            secret: shared_secret,
            sends_from_ms: 0,
            previous_until_ms: 0,
        }];
        keys.extend(rotated.iter().filter(|key| key.generation > 0).cloned());
        keys.sort_by_key(|key| key.generation);
        let current = keys
            .iter()
            .rposition(|key| key.sends_from_ms <= now_ms)
            .unwrap_or(0);
        let sends = keys[current].clone();
        let mut accepts = Vec::with_capacity(2);
        if current > 0 && now_ms < sends.previous_until_ms {
            accepts.push(keys[current - 1].clone());
        }
        accepts.push(sends.clone());
        // Announced, not yet sent: a rotation refuses to start while another is under way, so this is
        // at most one generation, and then the previous one is no longer accepted.
        accepts.extend(keys[current + 1..].iter().cloned());
        Self { sends, accepts }
    }

    /// The accepted generations, oldest first.
    pub fn accepted_generations(&self) -> Vec<u64> {
        self.accepts.iter().map(|key| key.generation).collect()
    }
}

/// The rotated generations (not generation 0, which is the shared secret). A row that does not decode is
/// logged and left out rather than failing the read: every node reads the keys every round, and one damaged
/// row must not make the whole cluster take its database for unreachable.
pub async fn read(client: &impl GenericClient) -> Result<Vec<RpcKey>, StoreError> {
    let rows = client
        .query(
            "SELECT key, value FROM veil_meta WHERE key LIKE 'rpc\\_key/%'",
            &[],
        )
        .await
        .map_err(db_error)?;
    Ok(rows
        .iter()
        .filter_map(|row| match decode(row.get(0), row.get(1)) {
            Ok(key) => Some(key),
            Err(error) => {
                tracing::error!(%error, "a row of the cluster token's keys is left out");
                None
            }
        })
        .collect())
}

fn decode(key: &str, value: &[u8]) -> Result<RpcKey, StoreError> {
    let corrupt = || {
        StoreError::Corrupt(format!(
            "the cluster token's key row {key:?} does not decode"
        ))
    };
    let generation = key
        .strip_prefix(KEY_PREFIX)
        .and_then(|generation| generation.parse().ok())
        .ok_or_else(corrupt)?;
    let (times, secret) = value.split_at_checked(16).ok_or_else(corrupt)?;
    let (sends_from, previous_until) = times.split_at(8);
    Ok(RpcKey {
        generation,
        secret: secret.try_into().map_err(|_| corrupt())?,
        sends_from_ms: u64::from_be_bytes(sends_from.try_into().map_err(|_| corrupt())?),
        previous_until_ms: u64::from_be_bytes(previous_until.try_into().map_err(|_| corrupt())?),
    })
}

fn encode(key: &RpcKey) -> (String, Vec<u8>) {
    let mut value = Vec::with_capacity(16 + SECRET_BYTES);
    value.extend_from_slice(&key.sends_from_ms.to_be_bytes());
    value.extend_from_slice(&key.previous_until_ms.to_be_bytes());
    value.extend_from_slice(&key.secret);
    (row_key(key.generation), value)
}

/// The `veil_meta` key of `generation`'s row.
fn row_key(generation: u64) -> String {
    format!("{KEY_PREFIX}{generation}")
}

/// Why a rotation did not start.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("no cluster has run on this database and schema yet (it has no shared secret): start a node first")]
    NoCluster,
    #[error(
        "a rotation is under way: generation {generation} is sent from {sends_from_ms} ms and the one before \
         it is accepted until {previous_until_ms} ms (database time, ms since the epoch); rotate again after that"
    )]
    UnderWay {
        generation: u64,
        sends_from_ms: u64,
        previous_until_ms: u64,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Adds the next generation with the key `random` makes, sent from one `step_ms` after the database's now and
/// the one before refused one step later; deletes the generations no node accepts any more. Refused while a
/// rotation is under way. Returns the new generation.
pub async fn rotate(
    client: &mut Client,
    step_ms: u64,
    random: impl FnOnce() -> [u8; SECRET_BYTES],
) -> Result<RpcKey, RotateError> {
    let transaction = client.transaction().await.map_err(db_error)?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&ROTATION_LOCK])
        .await
        .map_err(db_error)?;
    if crate::secret::load(&transaction).await?.is_none() {
        return Err(RotateError::NoCluster);
    }
    let now_ms = crate::clock::db_now_ms(&transaction).await?.max(0) as u64;
    let rotated = read(&transaction).await?;
    if let Some(newest) = rotated.iter().max_by_key(|key| key.generation) {
        if now_ms < newest.previous_until_ms {
            return Err(RotateError::UnderWay {
                generation: newest.generation,
                sends_from_ms: newest.sends_from_ms,
                previous_until_ms: newest.previous_until_ms,
            });
        }
    }
    let current = rotated.iter().map(|key| key.generation).max().unwrap_or(0);
    let next = RpcKey {
        generation: current + 1,
        secret: random(),
        sends_from_ms: now_ms.saturating_add(step_ms),
        previous_until_ms: now_ms.saturating_add(step_ms.saturating_mul(2)),
    };
    for old in rotated.iter().filter(|key| key.generation < current) {
        transaction
            .execute(
                "DELETE FROM veil_meta WHERE key = $1",
                &[&row_key(old.generation)],
            )
            .await
            .map_err(db_error)?;
    }
    let (key, value) = encode(&next);
    transaction
        .execute(
            "INSERT INTO veil_meta (key, value) VALUES ($1, $2)",
            &[&key, &value],
        )
        .await
        .map_err(db_error)?;
    transaction.commit().await.map_err(db_error)?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARED: [u8; SECRET_BYTES] = [0; SECRET_BYTES];

    fn key(generation: u64, sends_from_ms: u64, previous_until_ms: u64) -> RpcKey {
        RpcKey {
            generation,
            secret: [generation as u8; SECRET_BYTES],
            sends_from_ms,
            previous_until_ms,
        }
    }

    fn in_force(now_ms: u64, rotated: &[RpcKey]) -> (u64, Vec<u64>) {
        let keys = KeysInForce::at(now_ms, SHARED, rotated);
        (keys.sends.generation, keys.accepted_generations())
    }

    #[test]
    fn a_cluster_that_never_rotated_sends_and_accepts_its_shared_secret_alone() {
        let keys = KeysInForce::at(5, SHARED, &[]);
        assert_eq!(keys.sends.secret, SHARED);
        assert_eq!(keys.accepted_generations(), vec![0]);
    }

    #[test]
    fn a_rotation_is_accepted_first_then_sent_then_the_old_key_is_refused() {
        let rotated = [key(1, 1_000, 2_000)];
        assert_eq!(
            in_force(999, &rotated),
            (0, vec![0, 1]),
            "announced: accepted, not sent"
        );
        assert_eq!(
            in_force(1_000, &rotated),
            (1, vec![0, 1]),
            "sent, the old one still accepted"
        );
        assert_eq!(in_force(1_999, &rotated), (1, vec![0, 1]));
        assert_eq!(
            in_force(2_000, &rotated),
            (1, vec![1]),
            "the old key retired"
        );
    }

    #[test]
    fn only_the_generation_before_the_one_sent_can_still_be_accepted() {
        // The second rotation came at 4 000 with a step of 1 000.
        let rotated = [key(1, 1_000, 2_000), key(2, 5_000, 6_000)];
        assert_eq!(in_force(3_000, &rotated[..1]), (1, vec![1]));
        assert_eq!(in_force(4_000, &rotated), (1, vec![1, 2]));
        assert_eq!(in_force(5_500, &rotated), (2, vec![1, 2]));
        assert_eq!(
            in_force(6_000, &rotated),
            (2, vec![2]),
            "neither 0 nor 1 come back"
        );
    }

    #[test]
    fn a_row_round_trips_and_a_damaged_one_does_not_decode_rather_than_panic() {
        let original = key(7, 123, 456);
        let (name, value) = encode(&original);
        assert_eq!(decode(&name, &value).ok(), Some(original));
        assert!(decode(&name, &value[..20]).is_err());
        assert!(decode("rpc_key/x", &value).is_err());
    }
}
