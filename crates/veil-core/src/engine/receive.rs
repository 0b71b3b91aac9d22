//! Receiving: long polls, delivery under the lock (FIFO groups, retried attempts, the in-flight limit), the
//! payload read after it, and peek, which delivers nothing.

use std::sync::Arc;

use futures_util::future::{FutureExt, Shared};

use super::moves::{DeadLetter, Destination, DEAD_LETTER_MOVES_PER_RECEIVE_MAX};
use super::{Engine, Locked};
use crate::clock::Millis;
use crate::error::{EngineError, EngineResult};
use crate::history::{Consumer, DeliveryRecord};
use crate::index::QueueIndex;
use crate::limits;
use crate::model::*;
use crate::receipt::Receipt;
use crate::store::{Commit, StoreOp};
use crate::waiters::Parked;

impl Engine {
    /// Receives up to `max_messages`, waiting up to `wait_ms` for the first one (long polling).
    pub async fn receive(
        &self,
        key: &QueueKey,
        options: ReceiveOptions,
    ) -> EngineResult<Vec<Message>> {
        Ok(self.receive_detailed(key, options).await?.messages)
    }

    /// `receive`, also reporting how many expired messages it found (and removed) on the way.
    pub async fn receive_detailed(
        &self,
        key: &QueueKey,
        options: ReceiveOptions,
    ) -> EngineResult<Received> {
        // The consumer's identity goes into every delivery history it makes: bounded like any identifier.
        if let Some(identity) = options.consumer.as_ref().and_then(|c| c.identity.as_ref()) {
            crate::ident::check(crate::ident::IdentKind::ConsumerIdentity, identity)?;
        }
        let max_messages = options.max_messages.clamp(1, limits::RECEIVE_MESSAGES_MAX);
        let started = self.clock.now();
        // Known after the first attempt, which reads the queue's default wait under the same lock.
        let mut deadline = None;
        let mut closing = self.closing.subscribe();
        let mut expired = 0;
        loop {
            let now = self.clock.now();
            let attempt = self.receive_now(key, max_messages, &options, now)?;
            expired += attempt.expired;
            let wait_ms = options.wait_ms.unwrap_or(attempt.queue_wait_ms);
            let deadline = *deadline.get_or_insert_with(|| {
                started.saturating_add(wait_ms.min(limits::RECEIVE_WAIT_MS_MAX))
            });
            if !attempt.delivered.is_empty() {
                Self::durable(attempt.commit).await?;
                let messages = self.with_payloads(attempt.queue, attempt.delivered).await?;
                return Ok(Received { messages, expired });
            }
            // Nothing delivered: what was submitted (expiry, dead-letter moves) is no success to wait for.
            drop(attempt.commit);
            if attempt.dead_letters_left {
                continue; // the per-receive move cap stopped this attempt, not an empty queue
            }
            if now >= deadline || *closing.borrow_and_update() {
                return Ok(Received {
                    messages: Vec::new(),
                    expired,
                });
            }
            let wake_at = attempt.next_due.map_or(deadline, |due| due.min(deadline));
            // Registered under the lock the attempt held, so no send after it goes unnoticed.
            let mut notified = attempt
                .notified
                .expect("an empty attempt registers for wake-ups");
            crate::park::parking();
            // Biased, the wake first: a delivery that is there is served even if the timer is due too.
            let handed = tokio::select! {
                biased;
                handed = &mut notified => handed,
                _ = self.clock.sleep_until(wake_at) => None,
                _ = closing.changed() => None,
            };
            // Woken otherwise: a send that chose this waiter meanwhile has delivered (serve it) or now finds
            // its slot closed (and makes the messages visible again).
            if let Some(handed) = handed.or_else(|| notified.close()) {
                let messages = self.take_hand_off(handed).await?;
                return Ok(Received { messages, expired });
            }
        }
    }

    /// What a send delivered to this waiting receive, once the send's commit (which carries the deliveries)
    /// is durable.
    async fn take_hand_off(&self, handed: HandOff) -> EngineResult<Vec<Message>> {
        handed.durable.await?;
        self.with_payloads(handed.queue, handed.delivered).await
    }

    /// Under a send's lock: delivers the locked standard queue's ready messages to its parked waiters, oldest
    /// first, into the send's own store changes (src/waiters.rs). Returns each delivery with the waiter it is
    /// for; the caller hands them over once the commit is submitted ([`Engine::hand_over`]).
    pub(super) fn hand_off(&self, locked: &mut Locked<'_>) -> Handed {
        let mut handed = Vec::new();
        loop {
            let index = locked.index();
            if index.fifo.is_some() || index.next_ready(None).is_none() {
                break;
            }
            let Some(parked) = index.waiters.take_parked() else {
                break;
            };
            match self.deliver(locked, parked.max_messages, &parked.options) {
                Ok(attempt) if !attempt.delivered.is_empty() => handed.push((parked, attempt)),
                // Nothing deliverable for it (the in-flight limit, only dead letters moved): it waits on.
                Ok(_) | Err(_) => {
                    locked.index().waiters.unpark(parked);
                    break;
                }
            }
        }
        handed
    }

    /// After a send submitted its commit: gives each parked waiter its delivery and waits for the commit
    /// with them. A waiter that went away after it was chosen gets nothing: its messages are made visible
    /// again (a visibility change to 0 through their receipts), so none waits out a visibility timeout for a
    /// receive that no longer exists.
    pub(super) async fn hand_over(
        &self,
        key: &QueueKey,
        handed: Handed,
        commit: Option<Commit>,
    ) -> EngineResult<()> {
        if handed.is_empty() {
            return Self::durable(commit).await;
        }
        let durable = commit
            .unwrap_or_else(|| self.store.submit(Vec::new()))
            .shared();
        let mut orphaned = Vec::new();
        for (parked, attempt) in handed {
            let offer = HandOff {
                queue: attempt.queue,
                delivered: attempt.delivered,
                durable: durable.clone(),
            };
            if let Err(refused) = parked.slot.send(offer) {
                orphaned.extend(refused.delivered);
            }
        }
        durable.await?;
        if !orphaned.is_empty() {
            self.make_visible_again(key, orphaned).await?;
        }
        Ok(())
    }

    /// Deliveries nobody will answer become visible at once, if each is still the message's current one.
    async fn make_visible_again(
        &self,
        key: &QueueKey,
        orphaned: Vec<Delivery>,
    ) -> EngineResult<()> {
        let receipts: Vec<String> = orphaned
            .iter()
            .filter_map(|d| d.receipt.as_ref().map(|r| self.receipts.encode(r)))
            .collect();
        let change = VisibilityChange {
            visibility_ms: 0,
            since_receive_ms_max: None,
            not_past_expiry: false,
            receipts: ReceiptRule::Current,
        };
        let entries: Vec<(&str, VisibilityChange)> =
            receipts.iter().map(|r| (r.as_str(), change)).collect();
        // Each entry's own failure means the message moved on (deleted, received again): nothing to undo.
        self.change_visibility_batch(key, &entries).await?;
        Ok(())
    }

    fn receive_now(
        &self,
        key: &QueueKey,
        max_messages: usize,
        options: &ReceiveOptions,
        now: Millis,
    ) -> EngineResult<ReceiveAttempt> {
        let (attempt, commit) =
            self.on_queue(key, now, |locked| -> EngineResult<ReceiveAttempt> {
                let mut attempt = self.deliver(locked, max_messages, options)?;
                let index = locked.index();
                attempt.queue_wait_ms = index.record.config.receive_wait_ms;
                if attempt.delivered.is_empty() {
                    // Before the lock is let go: every send and nack wakes under it, and a send delivers to a
                    // parked waiter of a standard queue directly (src/waiters.rs).
                    attempt.notified = Some(if index.fifo.is_some() {
                        index.waiters.register()
                    } else {
                        index.waiters.park(options, max_messages)
                    });
                }
                Ok(attempt)
            })?;
        let mut attempt = attempt?;
        attempt.commit = commit;
        Ok(attempt)
    }

    /// The part of a receive that needs the lock: hands out up to `max_messages` visible messages of the
    /// locked queue with new receipts, and moves those that have been received too often instead.
    fn deliver(
        &self,
        locked: &mut Locked<'_>,
        max_messages: usize,
        options: &ReceiveOptions,
    ) -> EngineResult<ReceiveAttempt> {
        let (id, now, expired) = (locked.id, locked.now, locked.expired);
        let queue_dead_letter = self.queue_dead_letter(locked.state, id);
        let (index, ops) = locked.parts();
        // Interned once per receive, not per message: a lookup hashes the consumer's strings.
        let consumer = options
            .consumer
            .as_ref()
            .filter(|_| index.record.config.delivery_history)
            .map(|consumer| index.history.consumer(consumer));
        let grant = Grant::of(options, &index.record.config, consumer.as_ref());
        let inflight_max = u64::from(index.record.config.inflight_max);
        let fifo = index.fifo.is_some();
        if index.hidden() >= inflight_max && !fifo {
            return Err(EngineError::OverLimit {
                inflight: index.hidden(),
                limit: index.record.config.inflight_max,
            });
        }
        let attempt_id = options.attempt_id.as_deref().filter(|_| fifo);
        let before = index.counters;
        if let Some(repeated) =
            attempt_id.and_then(|id| self.repeat_attempt(index, id, grant, now, ops))
        {
            // A repeat with visibility 0 gives the messages back: redeliveries.
            index.persist_counters_since(before, ops);
            return Ok(ReceiveAttempt::of(id, repeated, expired));
        }
        let mut run = Run {
            delivered: Vec::new(),
            moves: Vec::new(),
            dead_letters_left: false,
            max_messages,
            inflight_max,
        };
        self.deliver_ready(
            index,
            &mut run,
            (grant, queue_dead_letter.as_ref(), now),
            ops,
        );
        let Run {
            delivered,
            moves,
            dead_letters_left,
            ..
        } = run;
        if let (Some(attempt_id), false) = (attempt_id, delivered.is_empty()) {
            Self::remember_attempt(index, attempt_id, &delivered, now);
        }
        let counters_changed = !delivered.is_empty() || !moves.is_empty();
        let next_due = index.next_pending_due();
        self.dead_letter(locked.state, id, moves, now, &mut locked.ops);
        if counters_changed {
            let counters = locked.index().counters;
            locked.ops.push(StoreOp::put_counters(id, counters));
        }
        Ok(ReceiveAttempt {
            next_due,
            dead_letters_left,
            ..ReceiveAttempt::of(id, delivered, expired)
        })
    }

    /// Walks the queue's visible messages in delivery order until `run` has what it wants, skipping FIFO
    /// groups that have a message in flight.
    fn deliver_ready(
        &self,
        index: &mut QueueIndex,
        run: &mut Run,
        grant: (Grant<'_>, Option<&(Destination, u32)>, Millis),
        ops: &mut Vec<StoreOp>,
    ) {
        let mut cursor = None;
        while run.wants_more(index) {
            let Some(entry) = index.next_ready(cursor) else {
                break;
            };
            cursor = Some(entry);
            if index.fifo.as_ref().is_some_and(|f| f.blocked(entry.1)) {
                continue; // a FIFO group with a message in flight delivers nothing
            }
            self.deliver_from(index, entry.1, run, grant, ops);
        }
    }

    /// Delivers the visible message `seq` and, in a FIFO queue, the visible messages after it in its group
    /// (one receive may take several of a group, in order), moving those received too often instead.
    fn deliver_from(
        &self,
        index: &mut QueueIndex,
        first: Seq,
        run: &mut Run,
        (grant, queue_dead_letter, now): (Grant<'_>, Option<&(Destination, u32)>, Millis),
        ops: &mut Vec<StoreOp>,
    ) {
        let mut next = Some(first);
        while let Some(seq) = next.filter(|_| run.wants_more(index)) {
            next = index.fifo.as_ref().and_then(|f| f.next_in_group(seq));
            let Some(current) = index.get(seq).filter(|s| s.visible_at <= now) else {
                break; // gone, or not visible: the rest of the group waits behind it
            };
            if run.delivered.iter().any(|d| d.seq == seq) {
                break; // delivered with visibility 0 and still visible
            }
            if let Some(route) = Self::dead_letter_route(index, seq, current, queue_dead_letter) {
                if run.moves.len() >= DEAD_LETTER_MOVES_PER_RECEIVE_MAX {
                    run.dead_letters_left = true;
                    break;
                }
                let group = index.group_of(seq).map(str::to_owned);
                let history = index.history.take(seq);
                index.remove(seq);
                run.moves.push(DeadLetter {
                    seq,
                    state: current,
                    route,
                    history,
                    group,
                });
                continue;
            }
            let delivery = self.hand_out(index, seq, current, grant, now, ops);
            run.delivered.push(delivery);
        }
    }

    /// A retried FIFO receive (same attempt id, within its time) gets what the first one delivered, with the
    /// same receipts and a fresh visibility, while every one of those messages is still in flight under that
    /// delivery; otherwise `None` and the receive delivers anew.
    fn repeat_attempt(
        &self,
        index: &mut QueueIndex,
        attempt_id: &str,
        grant: Grant<'_>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> Option<Vec<Delivery>> {
        let attempt = index.fifo.as_mut()?.attempts.get(attempt_id, now)?;
        let unchanged = attempt.deliveries.iter().all(|&(seq, generation, _)| {
            index
                .get(seq)
                .is_some_and(|s| s.generation == generation && s.visible_at > now)
        });
        if !unchanged {
            return None;
        }
        let visible_at = now.saturating_add(grant.visibility_ms);
        let mut repeated = Vec::with_capacity(attempt.deliveries.len());
        for (seq, _, receipt) in attempt.deliveries {
            let current = index.get(seq).expect("checked above");
            let state = MessageState {
                visible_at,
                ..current
            };
            index.replace(seq, state, now);
            ops.push(StoreOp::PutState {
                queue: index.id(),
                seq,
                state,
            });
            repeated.push(Delivery {
                seq,
                state,
                receipt: Some(receipt),
                redrive: index.redrive(seq).cloned(),
                wants_id: false,
            });
        }
        Some(repeated)
    }

    fn remember_attempt(
        index: &mut QueueIndex,
        attempt_id: &str,
        delivered: &[Delivery],
        now: Millis,
    ) {
        let Some(fifo) = index.fifo.as_mut() else {
            return;
        };
        let deliveries = delivered
            .iter()
            .filter_map(|d| Some((d.seq, d.state.generation, d.receipt?)))
            .collect();
        fifo.attempts.remember(
            attempt_id.to_owned(),
            crate::fifo::Attempt {
                at: now,
                deliveries,
            },
        );
    }

    /// Delivers one visible message: its count, first-receive time, deadline and generation change, and it gets
    /// a new receipt that makes every older one stale.
    fn hand_out(
        &self,
        index: &mut QueueIndex,
        seq: Seq,
        current: MessageState,
        grant: Grant<'_>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> Delivery {
        let next = MessageState {
            visible_at: now.saturating_add(grant.visibility_ms),
            first_received_at: if current.first_received_at == 0 {
                now
            } else {
                current.first_received_at
            },
            receive_count: current.receive_count + 1,
            generation: current.generation + 1,
            dead_letter_on_release: grant.dead_letter == DeadLetterTiming::OnRelease,
            ..current
        };
        assert!(
            next.receive_count > current.receive_count,
            "receive count only grows"
        );
        index.replace(seq, next, now);
        index.counters.deliveries += 1;
        index.count_delivery(next.receive_count);
        ops.push(StoreOp::PutState {
            queue: index.id(),
            seq,
            state: next,
        });
        let wants_id = Self::record_delivery(index, seq, (current, next), grant, now, ops);
        // Encoded (a keyed hash) once the lock is released, in `with_payloads` (ADR 0012).
        let receipt = Receipt {
            queue: index.id(),
            seq,
            generation: next.generation,
            issued_at: now,
        };
        Delivery {
            seq,
            state: next,
            receipt: Some(receipt),
            redrive: index.redrive(seq).cloned(),
            wants_id,
        }
    }

    /// Adds a delivery to the message's history, written in the same submission as its state (no commit of
    /// its own). Returns whether the history still wants its message id. Nothing for a queue with history off.
    fn record_delivery(
        index: &mut QueueIndex,
        seq: Seq,
        (previous, next): (MessageState, MessageState),
        grant: Grant<'_>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> bool {
        if !index.record.config.delivery_history {
            return false;
        }
        let record = DeliveryRecord {
            received_at: now,
            receive_count: next.receive_count,
            generation: next.generation,
            consumer: grant.consumer.cloned(),
            visibility_ms: grant.visibility_ms,
            visibility_changes: 0,
            last_visibility_change: None,
            ended: None,
        };
        let queue = index.id();
        let (history, wants_id) = index.history.delivered(seq, previous, record);
        ops.push(StoreOp::PutHistory {
            queue,
            seq,
            history: history.clone(),
        });
        wants_id
    }

    /// The delivered messages with their payloads; histories that wanted their message ids learn them.
    async fn with_payloads(
        &self,
        queue: QueueId,
        delivered: Vec<Delivery>,
    ) -> EngineResult<Vec<Message>> {
        let seqs: Vec<Seq> = delivered.iter().map(|d| d.seq).collect();
        let wants_ids = delivered.iter().any(|d| d.wants_id);
        let payloads = self.store.read_payloads_later(queue, seqs).await?;
        let messages: Vec<Message> = delivered
            .into_iter()
            .zip(payloads)
            // A payload can be missing only if the message was deleted (or purged) since it was delivered.
            .filter_map(|(delivery, payload)| {
                payload.map(|payload| Message {
                    seq: delivery.seq,
                    payload,
                    state: delivery.state,
                    receipt: delivery.receipt.map(|r| self.receipts.encode(&r)),
                    redrive: delivery.redrive,
                })
            })
            .collect();
        if wants_ids {
            self.learn_ids(queue, &messages);
        }
        Ok(messages)
    }

    /// Returns up to `max_messages` visible messages without changing anything.
    pub async fn peek(&self, key: &QueueKey, max_messages: usize) -> EngineResult<Vec<Message>> {
        let max_messages = max_messages.clamp(1, limits::RECEIVE_MESSAGES_MAX);
        self.inspect(key, |index, now| {
            index
                .peek_order(now, max_messages)
                .into_iter()
                .filter_map(|seq| Some((seq, index.get(seq)?)))
                .collect()
        })
        .await
    }

    /// The messages `pick` chooses from a queue brought up to now, with their payloads, changing nothing: no
    /// receipt, no receive count (peek and an operator's browse).
    pub(super) async fn inspect(
        &self,
        key: &QueueKey,
        pick: impl FnOnce(&QueueIndex, Millis) -> Vec<(Seq, MessageState)>,
    ) -> EngineResult<Vec<Message>> {
        let now = self.clock.now();
        let ((queue, seen), commit) = self.on_queue(key, now, |locked| {
            let index = locked.index();
            let seen = pick(index, now)
                .into_iter()
                .map(|(seq, state)| Delivery {
                    seq,
                    state,
                    receipt: None,
                    redrive: index.redrive(seq).cloned(),
                    wants_id: false,
                })
                .collect();
            (locked.id, seen)
        })?;
        // A barrier: what we saw may include sends not yet durable; answer only once they are. Every such send
        // was submitted before we took the lock, so a barrier submitted now resolves after them.
        let barrier = commit.unwrap_or_else(|| self.store.submit(Vec::new()));
        barrier.await?;
        self.with_payloads(queue, seen).await
    }

    /// Tells the histories of just-delivered messages their ids, read with the payloads after the lock: one
    /// more short critical section, only for a receive that delivered a message whose history did not know
    /// its id (mostly a first delivery).
    fn learn_ids(&self, queue: QueueId, messages: &[Message]) {
        let mut state = self.state.lock();
        if let Some(index) = state.queues.get_mut(&queue) {
            let ids = messages.iter().map(|m| (m.seq, m.payload.message_id));
            index.history.learn_ids(ids);
        }
    }
}

/// What one receive grants each message it delivers.
#[derive(Clone, Copy)]
struct Grant<'a> {
    visibility_ms: Millis,
    dead_letter: DeadLetterTiming,
    /// Who receives, for the delivery history: the queue's shared copy.
    consumer: Option<&'a Arc<Consumer>>,
}

impl<'a> Grant<'a> {
    /// The receive's own visibility, else the queue's, within the engine's range.
    fn of(
        options: &ReceiveOptions,
        config: &QueueConfig,
        consumer: Option<&'a Arc<Consumer>>,
    ) -> Self {
        Self {
            visibility_ms: options
                .visibility_ms
                .unwrap_or(config.visibility_timeout_ms)
                .min(limits::VISIBILITY_TIMEOUT_MS_MAX),
            dead_letter: options.dead_letter,
            consumer,
        }
    }
}

/// One message a receive or peek hands out, before its payload is read.
struct Delivery {
    seq: Seq,
    state: MessageState,
    /// `None` for a peek. Not yet encoded: that happens outside the engine lock.
    receipt: Option<Receipt>,
    redrive: Option<MessageRedrivePolicy>,
    /// This delivery's history does not know its message id yet: the receive tells it once it read the
    /// payload.
    wants_id: bool,
}

/// The deliveries a send made to parked waiters, each with its waiter.
pub(super) type Handed = Vec<(Parked, ReceiveAttempt)>;

/// Messages a send delivered to a parked receive (src/waiters.rs), durable once `durable` resolves: the
/// send's commit, which carries the deliveries' store changes.
pub(crate) struct HandOff {
    queue: QueueId,
    delivered: Vec<Delivery>,
    durable: Shared<Commit>,
}

pub(super) struct ReceiveAttempt {
    queue: QueueId,
    delivered: Vec<Delivery>,
    next_due: Option<Millis>,
    /// Messages found expired by this attempt.
    expired: u64,
    /// The per-receive cap on dead-letter moves left messages that are due to move.
    dead_letters_left: bool,
    /// The queue's default receive wait, for a receive that names none.
    queue_wait_ms: Millis,
    /// An attempt that delivered nothing registers for the queue's wake-ups before the lock is let go.
    notified: Option<crate::waiters::Waiting>,
    commit: Option<Commit>,
}

impl ReceiveAttempt {
    /// An attempt that delivered `delivered` and moved nothing it had to leave for later; the caller fills in
    /// what else it learned.
    fn of(queue: QueueId, delivered: Vec<Delivery>, expired: u64) -> Self {
        Self {
            queue,
            delivered,
            next_due: None,
            expired,
            dead_letters_left: false,
            queue_wait_ms: 0,
            notified: None,
            commit: None,
        }
    }
}

/// What one receive has delivered and moved so far, and when it stops.
struct Run {
    delivered: Vec<Delivery>,
    moves: Vec<DeadLetter>,
    /// The per-receive cap on dead-letter moves stopped it.
    dead_letters_left: bool,
    max_messages: usize,
    inflight_max: u64,
}

impl Run {
    fn wants_more(&self, index: &QueueIndex) -> bool {
        self.delivered.len() < self.max_messages
            && index.hidden() < self.inflight_max
            && !self.dead_letters_left
    }
}
