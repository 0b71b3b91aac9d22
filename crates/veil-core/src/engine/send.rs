//! Sending: the checks a send must pass (size, FIFO group and deduplication id), FIFO deduplication, and
//! the new messages' state, payload and store changes.

use super::receive::Handed;
use super::{Engine, Locked};
use crate::clock::Millis;
use crate::error::{EngineError, EngineResult};
use crate::index::QueueIndex;
use crate::model::*;
use crate::store::StoreOp;

impl Engine {
    pub async fn send(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
    ) -> EngineResult<Vec<SentMessage>> {
        let now = self.clock.now();
        if messages
            .iter()
            .any(|m| m.redrive.as_ref().is_some_and(|p| p.max_receive_count == 0))
        {
            return Err(receive_count_zero());
        }
        for message in &messages {
            crate::ident::check_new_message(message)?;
        }
        // Digests and ids are computed before taking the lock: they need no shared state. The body's SHA-256
        // only for a queue that deduplicates by content (a standard queue's grouped sends need none).
        let by_content = messages
            .iter()
            .any(|m| m.group.is_some() && m.dedup_id.is_none())
            && self.dedups_by_content(key);
        let prepared: Vec<Prepared> = messages
            .iter()
            .map(|m| Prepared::of(m, by_content))
            .collect();
        let (sent, commit) = self.on_queue(key, now, |locked| -> EngineResult<(_, Handed)> {
            let sent = Self::store_messages(locked, messages, prepared)?;
            Ok((sent, self.hand_off(locked)))
        })?;
        let (sent, handed) = sent?;
        self.hand_over(key, handed, commit).await?;
        Ok(sent)
    }

    /// Sends several messages to one queue, each judged on its own: a message the queue refuses (too large, a
    /// FIFO queue's missing group or deduplication id, a max receive count of 0) gets its own error while the
    /// others are stored — all of them under one lock and with one commit. The outer error is the queue's (or
    /// the store's). KubeMQ's batch send and upstream stream.
    pub async fn send_each(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
    ) -> EngineResult<Vec<EngineResult<SentMessage>>> {
        let now = self.clock.now();
        let by_content = messages
            .iter()
            .any(|m| m.group.is_some() && m.dedup_id.is_none())
            && self.dedups_by_content(key);
        let prepared: Vec<Prepared> = messages
            .iter()
            .map(|m| Prepared::of(m, by_content))
            .collect();
        let (results, commit) = self.on_queue(key, now, |locked| -> EngineResult<(_, Handed)> {
            let config = &locked.index().record.config;
            let (size_max, fifo) = (config.message_size_bytes_max, config.fifo);
            let mut results: Vec<Option<EngineResult<SentMessage>>> = Vec::new();
            let (mut accepted, mut accepted_prepared) = (Vec::new(), Vec::new());
            for (message, prepared) in messages.into_iter().zip(prepared) {
                match check_one_send(&message, size_max, fifo.as_ref()) {
                    Ok(()) => {
                        accepted.push(message);
                        accepted_prepared.push(prepared);
                        results.push(None);
                    }
                    Err(error) => results.push(Some(Err(error))),
                }
            }
            if accepted.is_empty() {
                return Ok((results.into_iter().flatten().collect(), Vec::new()));
            }
            let mut sent = Self::store_messages(locked, accepted, accepted_prepared)?.into_iter();
            let results = results
                .into_iter()
                .filter_map(|result| result.or_else(|| sent.next().map(Ok)))
                .collect();
            Ok((results, self.hand_off(locked)))
        })?;
        let (results, handed) = results?;
        self.hand_over(key, handed, commit).await?;
        Ok(results)
    }

    /// Whether the queue is FIFO with content-based deduplication (a brief look under the lock).
    fn dedups_by_content(&self, key: &QueueKey) -> bool {
        let state = self.state.lock();
        let config = state
            .by_key
            .get(key)
            .map(|id| &state.queues[id].record.config);
        config
            .and_then(|c| c.fifo)
            .is_some_and(|f| f.content_based_dedup)
    }

    /// Adds new messages to a locked queue: the part of `send` that needs the lock. A FIFO message whose
    /// deduplication id the queue still remembers is answered with the first send's message, not stored.
    fn store_messages(
        locked: &mut Locked<'_>,
        messages: Vec<NewMessage>,
        prepared: Vec<Prepared>,
    ) -> EngineResult<Vec<SentMessage>> {
        let (id, now) = (locked.id, locked.now);
        let (index, ops) = locked.parts();
        let config = &index.record.config;
        check_sends(config, &messages)?;
        let defaults = QueueDefaults {
            fifo: config.fifo,
            delay_ms: config.delay_ms,
            retention_ms: config.retention_ms,
        };
        ops.reserve(messages.len() + 2);
        let mut sent = Vec::with_capacity(messages.len());
        let mut wake = false;
        for (message, prepared) in messages.into_iter().zip(prepared) {
            let dedup = defaults
                .fifo
                .map(|fifo| Dedup::of(&fifo, &message, prepared.body_sha256.as_deref()));
            if let Some(original) = dedup
                .as_ref()
                .and_then(|dedup| Self::remembered(index, &defaults, &dedup.key, now))
            {
                sent.push(duplicate_of(original, prepared.body_md5, id, now));
                continue;
            }
            let (one, woke) =
                Self::insert_new(index, ops, message, (prepared, dedup), &defaults, now);
            sent.push(one);
            wake |= woke;
        }
        ops.push(StoreOp::put_counters(id, index.counters));
        if wake {
            index.waiters.rearm();
        }
        Ok(sent)
    }

    /// The first send with this deduplication key, if the queue remembers it inside its interval.
    fn remembered(
        index: &QueueIndex,
        defaults: &QueueDefaults,
        key: &str,
        now: Millis,
    ) -> Option<DedupEntry> {
        let interval_ms = defaults.fifo?.dedup_interval_ms;
        index.fifo.as_ref()?.dedup.get(key, now, interval_ms)
    }

    /// Stores one new message: a sequence number, its state in the index, its deduplication key remembered,
    /// and the store changes, in the order the log replays them. Returns what the send answers and the
    /// wake-up hint of the insert.
    fn insert_new(
        index: &mut QueueIndex,
        ops: &mut Vec<StoreOp>,
        message: NewMessage,
        (prepared, dedup): (Prepared, Option<Dedup>),
        defaults: &QueueDefaults,
        now: Millis,
    ) -> (SentMessage, bool) {
        let queue = index.id();
        let seq = index.alloc_seq(ops);
        let state = new_state(&message, now, defaults.delay_ms, defaults.retention_ms);
        let (dedup_id, dedup_key) = dedup.map(|d| (d.id, d.key)).unzip();
        let (payload, redrive) = payload_of(message, &prepared, dedup_id, now);
        let fifo_group = defaults
            .fifo
            .map(|_| payload.group.clone().unwrap_or_default());
        let wake = index.insert(seq, state, fifo_group.as_deref(), now);
        if let (Some(key), Some(fifo)) = (dedup_key, index.fifo.as_mut()) {
            let entry = DedupEntry {
                sent_at: now,
                message_id: payload.message_id,
                seq,
            };
            fifo.dedup.remember(key.clone(), entry);
            ops.push(StoreOp::PutDedup { queue, key, entry });
        }
        if let Some(policy) = &redrive {
            index.set_redrive(seq, policy.clone());
        }
        let sent = SentMessage {
            message_id: payload.message_id,
            body_md5: payload.body_md5,
            queue,
            seq,
            sent_at: now,
            visible_at: state.visible_at,
            expires_at: state.expires_at,
            duplicate: false,
        };
        ops.push(StoreOp::PutMessage(Box::new(crate::store::PutMessage {
            queue,
            seq,
            payload,
            state,
            redrive,
            fifo_group,
        })));
        index.counters.sends += 1;
        (sent, wake)
    }
}

/// The state of a message being sent: its delay and time to live, else the queue's.
fn new_state(
    message: &NewMessage,
    now: Millis,
    queue_delay_ms: Millis,
    queue_retention_ms: Option<Millis>,
) -> MessageState {
    let expires_at = match message.ttl {
        Some(Ttl::Never) => NEVER,
        Some(Ttl::After(ms)) => now.saturating_add(ms),
        None => queue_retention_ms.map_or(NEVER, |ms| now.saturating_add(ms)),
    };
    MessageState {
        sent_at: now,
        visible_at: now.saturating_add(message.delay_ms.unwrap_or(queue_delay_ms)),
        expires_at,
        first_received_at: 0,
        receive_count: 0,
        generation: 0,
        body_bytes: body_bytes(&message.body),
        dead_letter_on_release: false,
    }
}

/// What a send computes for each message before it takes the lock.
struct Prepared {
    body_md5: [u8; 16],
    message_id: [u8; 16],
    /// The body's SHA-256 in hex, for a message a FIFO queue may deduplicate by content (one with a group
    /// and no deduplication id).
    body_sha256: Option<String>,
}

impl Prepared {
    /// `by_content`: the queue deduplicates by content, so a message without an id needs its body's hash.
    fn of(message: &NewMessage, by_content: bool) -> Self {
        let by_content = by_content && message.dedup_id.is_none();
        Self {
            body_md5: body_md5(&message.body),
            message_id: uuid::Uuid::new_v4().into_bytes(),
            body_sha256: by_content.then(|| sha256_hex(&message.body)),
        }
    }
}

fn sha256_hex(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(body);
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

/// A message rule whose max receive count is 0 would dead-letter the message before its first delivery.
fn receive_count_zero() -> EngineError {
    EngineError::InvalidArgument("a message's max receive count must be at least 1".into())
}

/// What `send` refuses a whole call for, judged for one message of a `send_each`.
fn check_one_send(
    message: &NewMessage,
    size_bytes_max: u32,
    fifo: Option<&FifoConfig>,
) -> EngineResult<()> {
    if message
        .redrive
        .as_ref()
        .is_some_and(|p| p.max_receive_count == 0)
    {
        return Err(receive_count_zero());
    }
    crate::ident::check_new_message(message)?;
    if message.size_bytes > size_bytes_max as usize {
        return Err(EngineError::MessageTooLarge {
            size_bytes: message.size_bytes,
            max_bytes: size_bytes_max,
        });
    }
    match fifo {
        Some(fifo) => check_fifo_sends(fifo, std::slice::from_ref(message)),
        None => Ok(()),
    }
}

/// A FIFO queue refuses a send (all of it) with a message that names no group, or no deduplication id
/// while the queue does not deduplicate by content.
fn check_fifo_sends(fifo: &FifoConfig, messages: &[NewMessage]) -> EngineResult<()> {
    for message in messages {
        if message.group.is_none() {
            return Err(EngineError::GroupRequired);
        }
        if message.dedup_id.is_none() && !fifo.content_based_dedup {
            return Err(EngineError::DedupIdRequired);
        }
    }
    Ok(())
}

/// A body's length as a message state records it; bodies are far below 4 GiB (the size limits say so).
pub(super) fn body_bytes(body: &[u8]) -> u32 {
    u32::try_from(body.len()).unwrap_or(u32::MAX)
}

/// The settings of the queue a send stores new messages by, read once under the lock.
struct QueueDefaults {
    fifo: Option<FifoConfig>,
    delay_ms: Millis,
    retention_ms: Option<Millis>,
}

/// A FIFO message's deduplication id and the key its queue remembers it by.
struct Dedup {
    /// The sender's, or the body's SHA-256 in hex when the queue deduplicates by content.
    id: String,
    /// The id, prefixed by the message's group when the queue deduplicates per group (docs/semantics.md §4).
    key: String,
}

impl Dedup {
    fn of(fifo: &FifoConfig, message: &NewMessage, body_sha256: Option<&str>) -> Self {
        // The hash is missing only if content-based deduplication was switched on since `send` looked.
        let id = match (&message.dedup_id, body_sha256) {
            (Some(id), _) => id.clone(),
            (None, Some(hash)) => hash.to_owned(),
            (None, None) => sha256_hex(&message.body),
        };
        let by_group = fifo.dedup_scope == DedupScope::Group;
        let key = crate::fifo::dedup_key(message.group.as_deref().filter(|_| by_group), &id);
        Self { id, key }
    }
}

/// What a send answers for a FIFO message deduplicated against `original`: the first send's id and seq.
fn duplicate_of(
    original: DedupEntry,
    body_md5: [u8; 16],
    queue: QueueId,
    now: Millis,
) -> SentMessage {
    SentMessage {
        message_id: original.message_id,
        body_md5,
        queue,
        seq: original.seq,
        sent_at: original.sent_at,
        visible_at: now,
        expires_at: NEVER,
        duplicate: true,
    }
}

/// The stored payload of a new message, and the message's own redrive rule (kept beside it, not in it).
fn payload_of(
    message: NewMessage,
    prepared: &Prepared,
    dedup_id: Option<String>,
    now: Millis,
) -> (Payload, Option<MessageRedrivePolicy>) {
    let payload = Payload {
        message_id: prepared.message_id,
        body: message.body,
        body_md5: prepared.body_md5,
        attributes: message.attributes,
        sent_at: now,
        sender_id: message.sender_id,
        moved_from: message.moved_from,
        group: message.group,
        dedup_id,
    };
    (payload, message.redrive)
}

/// What a send is refused for as a whole: a message over the queue's size limit, or a FIFO queue's message
/// without a group or deduplication id.
fn check_sends(config: &QueueConfig, messages: &[NewMessage]) -> EngineResult<()> {
    if let Some(too_large) = messages
        .iter()
        .find(|m| m.size_bytes > config.message_size_bytes_max as usize)
    {
        return Err(EngineError::MessageTooLarge {
            size_bytes: too_large.size_bytes,
            max_bytes: config.message_size_bytes_max,
        });
    }
    match &config.fifo {
        Some(fifo) => check_fifo_sends(fifo, messages),
        None => Ok(()),
    }
}
