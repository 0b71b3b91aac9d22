//! Messages moving between queues: dead-letter moves (a queue's redrive policy or a message's own, on receive
//! or on release; docs/semantics.md §3) and a consumer's re-queue (KubeMQ), each atomic under the one lock.

use super::{Engine, Locked, State};
use crate::clock::Millis;
use crate::error::EngineResult;
use crate::history::{DeliveryEnding, DeliveryHistory};
use crate::inbox::{self, ArrivalRule, Outbound};
use crate::index::QueueIndex;
use crate::model::*;
use crate::partition::Partition;
use crate::store::StoreOp;

/// Most dead-letter moves one receive performs before it returns; the next receive continues.
pub(super) const DEAD_LETTER_MOVES_PER_RECEIVE_MAX: usize = 1_000;

impl Engine {
    /// Moves the messages released with their receives used up under an `OnRelease` rule (KubeMQ), so that a
    /// consumer of the dead-letter queue sees them at once. One whose target is gone stays visible; the next
    /// receive applies the rule again.
    pub(super) fn release_dead_letters(&self, locked: &mut Locked<'_>) {
        let released = locked.index().take_released();
        if released.is_empty() {
            return; // the common case, twice per operation: no look-up beyond the index
        }
        let (id, now) = (locked.id, locked.now);
        let queue_dead_letter = self.queue_dead_letter(locked.state, id);
        let index = locked.index();
        let mut moves = Vec::new();
        for seq in released {
            let Some(current) = index.get(seq).filter(|s| s.visible_at <= now) else {
                continue; // deleted, or received again, since it was released
            };
            if let Some(route) =
                Self::dead_letter_route(index, seq, current, queue_dead_letter.as_ref())
            {
                let group = index.group_of(seq).map(str::to_owned);
                let history = index.history.take(seq);
                index.remove(seq);
                moves.push(DeadLetter {
                    seq,
                    state: current,
                    route,
                    history,
                    group,
                });
            }
        }
        if moves.is_empty() {
            return;
        }
        self.dead_letter(locked.state, id, moves, now, &mut locked.ops);
        let counters = locked.index().counters;
        locked.ops.push(StoreOp::put_counters(id, counters));
    }

    /// The target and threshold of a queue's redrive policy, if its dead-letter queue is another and exists
    /// here, or belongs to another partition (whose owner sends it back if it does not exist there).
    pub(super) fn queue_dead_letter(
        &self,
        state: &State,
        id: QueueId,
    ) -> Option<(Destination, u32)> {
        let policy = state.queues[&id].record.config.redrive_policy.as_ref()?;
        let target = self.destination(state, &policy.dead_letter_queue)?;
        (target != Destination::Here(id)).then_some((target, policy.max_receive_count))
    }

    /// Where a message for `key` goes: a queue of this engine, or the inbox of the partition `key` belongs
    /// to; `None` when the queue would be this engine's and does not exist.
    pub(super) fn destination(&self, state: &State, key: &QueueKey) -> Option<Destination> {
        match self
            .placement
            .and_then(|placement| placement.elsewhere(key))
        {
            Some(partition) => Some(Destination::Elsewhere(key.clone(), partition)),
            None => state.by_key.get(key).copied().map(Destination::Here),
        }
    }

    /// Where a message that is about to be delivered goes instead, if it has been received too often. The
    /// message's own policy, when it has one, takes precedence over the queue's.
    pub(super) fn dead_letter_route(
        index: &QueueIndex,
        seq: Seq,
        current: MessageState,
        queue_dead_letter: Option<&(Destination, u32)>,
    ) -> Option<DeadLetterRoute> {
        if let Some(policy) = index.redrive(seq) {
            return (current.receive_count >= policy.max_receive_count).then(|| {
                match &policy.dead_letter_queue {
                    Some(key) => DeadLetterRoute::MessagePolicy(key.clone()),
                    None => DeadLetterRoute::Drop,
                }
            });
        }
        let (target, max_receive_count) = queue_dead_letter?;
        (current.receive_count >= *max_receive_count)
            .then(|| DeadLetterRoute::QueuePolicy(target.clone()))
    }

    /// Applies the dead-letter moves and drops of one receive, already taken out of the source's index, in
    /// the same critical section. A queue-policy move keeps the message's receive count and send time
    /// (docs/semantics.md §3; expiry counted from the send by the dead-letter queue's retention); a
    /// message-policy move arrives as a fresh message (KubeMQ: count reset, policy cleared, expiry kept).
    pub(super) fn dead_letter(
        &self,
        state: &mut State,
        source: QueueId,
        moves: Vec<DeadLetter>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) {
        if moves.is_empty() {
            return;
        }
        let source_key = state.queues[&source].record.key.clone();
        // Each target once, with whether any arrival there needs its wake-up timer rearmed.
        let mut woken: Vec<(QueueId, bool)> = Vec::new();
        for DeadLetter {
            seq,
            state: moved,
            route,
            history,
            group,
        } in moves
        {
            let Some(landing) = self.dead_letter_target(state, (source, seq), route, now, ops)
            else {
                continue;
            };
            let index = state.queues.get_mut(&source).expect("source is locked");
            index.counters.dead_letter_moves += 1;
            let moved_from = MovedFrom {
                queue: source_key.clone(),
                reason: MoveReason::DeadLetter,
            };
            let (target, rule) = match landing {
                Landing::Here(target, rule) => {
                    // An arrival is the dead-letter queue's send (docs/semantics.md §9, "Totals").
                    let target_index = state.queues.get_mut(&target).expect("resolved above");
                    target_index.counters.sends += 1;
                    (target, rule)
                }
                Landing::Elsewhere(key, partition, rule) => {
                    let history = history.map(|history| {
                        let ending = DeliveryEnding::DeadLettered {
                            to: Box::new(key.clone()),
                        };
                        crate::history::ended_by_move(history, ending, now)
                    });
                    let entry = Outbound {
                        target: key,
                        rule,
                        state: moved,
                        moved_from: Some(moved_from),
                        redrive: None,
                        group,
                        history,
                    };
                    ops.push(StoreOp::SendToInbox(Box::new(crate::store::SendToInbox {
                        from: (source, seq),
                        partition,
                        entry,
                    })));
                    continue;
                }
            };
            let history = history.map(|history| {
                let to = state.queues[&target].record.key.clone();
                crate::history::ended_by_move(
                    history,
                    DeliveryEnding::DeadLettered { to: Box::new(to) },
                    now,
                )
            });
            let retention_ms = state.queues[&target].record.config.retention_ms;
            let arrival = Arrival {
                from: (source, seq),
                target,
                state: inbox::arrival_state(&rule, moved, retention_ms, now),
                moved_from,
                redrive: None,
                group,
                history,
            };
            let earliest = Self::arrive(state, arrival, now, ops);
            match woken.iter_mut().find(|(t, _)| *t == target) {
                Some((_, rearm)) => *rearm |= earliest,
                None => woken.push((target, earliest)),
            }
        }
        for (target, _) in &woken {
            ops.push(StoreOp::put_counters(
                *target,
                state.queues[target].counters,
            ));
        }
        Self::wake_targets(state, woken);
    }

    /// Wakes the waiters of each queue that dead letters arrived in, rearming its timer where an arrival is
    /// its earliest deadline.
    pub(super) fn wake_targets(state: &mut State, woken: Vec<(QueueId, bool)>) {
        for (target, rearm) in woken {
            let waiters = &mut state
                .queues
                .get_mut(&target)
                .expect("resolved above")
                .waiters;
            if rearm {
                waiters.rearm();
            }
            waiters.wake();
        }
    }

    /// Where a dead letter goes by its route, and how it arrives there; `None` for a message whose own rule
    /// names no queue, which is dropped here (counted, deleted from the store).
    fn dead_letter_target(
        &self,
        state: &mut State,
        (source, seq): (QueueId, Seq),
        route: DeadLetterRoute,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> Option<Landing> {
        match route {
            DeadLetterRoute::Drop => {
                let index = state.queues.get_mut(&source).expect("source is locked");
                index.counters.dead_letter_drops += 1;
                ops.push(StoreOp::DeleteMessage { queue: source, seq });
                None
            }
            DeadLetterRoute::QueuePolicy(Destination::Here(target)) => {
                Some(Landing::Here(target, ArrivalRule::DeadLetter))
            }
            DeadLetterRoute::QueuePolicy(Destination::Elsewhere(key, partition)) => {
                Some(Landing::Elsewhere(key, partition, ArrivalRule::DeadLetter))
            }
            DeadLetterRoute::MessagePolicy(key) => {
                let create_with = Self::created_dead_letter_config(state, source);
                match self
                    .placement
                    .and_then(|placement| placement.elsewhere(&key))
                {
                    Some(partition) => Some(Landing::Elsewhere(
                        key,
                        partition,
                        ArrivalRule::DeadLetterCreating { create_with },
                    )),
                    None => {
                        let target = match state.by_key.get(&key) {
                            Some(&id) => id,
                            None => Self::insert_queue(state, key, create_with.clone(), now, ops),
                        };
                        Some(Landing::Here(
                            target,
                            ArrivalRule::DeadLetterCreating { create_with },
                        ))
                    }
                }
            }
        }
    }

    /// Puts a message already taken out of its source index into `target` under a new seq, and queues the
    /// store move. Returns the wake-up hint of the insert.
    pub(super) fn arrive(
        state: &mut State,
        arrival: Arrival,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> bool {
        let target = state
            .queues
            .get_mut(&arrival.target)
            .expect("move target resolved under the same lock");
        let (to_seq, fifo_group, wake) = Self::place_arrival(
            target,
            arrival.state,
            arrival.group,
            arrival.redrive.as_ref(),
            (now, ops),
        );
        ops.push(StoreOp::MoveMessage(Box::new(crate::store::MoveMessage {
            from: arrival.from,
            to: (arrival.target, to_seq),
            state: arrival.state,
            moved_from: arrival.moved_from,
            redrive: arrival.redrive,
            fifo_group,
        })));
        // After the move, which deleted the history at `from` in the store.
        Self::history_arrives(target, to_seq, arrival.history, ops);
        wake
    }

    /// Puts a message arriving in `target` (a move here, or an inbox entry) into its index under a new seq,
    /// with its own rule, and a FIFO target orders it in its group (the empty group if it came from a queue
    /// without). Returns the seq, the group it is stored with, and the insert's wake-up hint.
    pub(super) fn place_arrival(
        target: &mut QueueIndex,
        state: MessageState,
        group: Option<String>,
        redrive: Option<&MessageRedrivePolicy>,
        (now, ops): (Millis, &mut Vec<StoreOp>),
    ) -> (Seq, Option<String>, bool) {
        let seq = target.alloc_seq(ops);
        let fifo_group = target.fifo.is_some().then(|| group.unwrap_or_default());
        let wake = target.insert(seq, state, fifo_group.as_deref(), now);
        if let Some(policy) = redrive {
            target.set_redrive(seq, policy.clone());
        }
        (seq, fifo_group, wake)
    }

    /// Keeps a moved message's delivery history at its new place, if its new queue records histories: written
    /// after the store operation that put the message there.
    pub(super) fn history_arrives(
        target: &mut QueueIndex,
        seq: Seq,
        history: Option<DeliveryHistory>,
        ops: &mut Vec<StoreOp>,
    ) {
        let Some(history) = history.filter(|_| target.record.config.delivery_history) else {
            return;
        };
        ops.push(StoreOp::PutHistory {
            queue: target.id(),
            seq,
            history: history.clone(),
        });
        target.history.arrived(seq, history);
    }

    /// Moves a message the caller holds (its current receipt) to `target` in one atomic, durable step, as a
    /// fresh visible message there: same id, body, attributes and own redrive rule; receive count reset; its
    /// expiry kept. Counted as a move out at the source and a send at the target. KubeMQ's re-queue.
    pub async fn move_message(
        &self,
        key: &QueueKey,
        receipt: &str,
        target: &QueueKey,
    ) -> EngineResult<()> {
        let mut results = self.move_messages(key, &[receipt], target).await?;
        results.pop().expect("one result per receipt")
    }

    /// [`Engine::move_message`] for several held messages of one queue: one lock and one commit for the lot.
    /// The outer error is the queues' (either missing) or the store's; each receipt has its own result.
    pub async fn move_messages(
        &self,
        key: &QueueKey,
        receipts: &[&str],
        target: &QueueKey,
    ) -> EngineResult<Vec<EngineResult<()>>> {
        crate::ident::check_key(target)?;
        let now = self.clock.now();
        let (results, commit) = self.on_queue(key, now, |locked| {
            let destination = match self.placement.and_then(|p| p.elsewhere(target)) {
                Some(partition) => Destination::Elsewhere(target.clone(), partition),
                None => Destination::Here(locked.state.queue_id(target)?),
            };
            let mut wake = false;
            let results: Vec<EngineResult<()>> = receipts
                .iter()
                .map(|receipt| {
                    wake |= self.move_held(locked, key, receipt, &destination)?;
                    Ok(())
                })
                .collect();
            if results.iter().any(Result::is_ok) {
                let id = locked.id;
                let source_counters = locked.index().counters;
                locked.ops.push(StoreOp::put_counters(id, source_counters));
                if let Destination::Here(target_id) = destination {
                    let target_index = locked.state.queues.get_mut(&target_id).expect("locked");
                    if wake {
                        target_index.waiters.rearm();
                    }
                    target_index.waiters.wake();
                    let target_counters = target_index.counters;
                    locked
                        .ops
                        .push(StoreOp::put_counters(target_id, target_counters));
                }
            }
            Ok(results)
        })?;
        Self::durable(commit).await?;
        results
    }

    /// One message of a [`Engine::move_messages`] batch, under the lock: taken out of the locked queue and
    /// arrived at its destination (or sent to its partition's inbox), both counted. Returns the wake-up hint
    /// of an arrival here.
    fn move_held(
        &self,
        locked: &mut Locked<'_>,
        key: &QueueKey,
        receipt: &str,
        destination: &Destination,
    ) -> EngineResult<bool> {
        let (id, now, index) = (locked.id, locked.now, locked.index());
        let Held {
            seq,
            state: moved,
            redrive,
            group,
            history,
        } = self.take_held(index, receipt)?;
        index.counters.moves_out += 1;
        let moved_from = MovedFrom {
            queue: key.clone(),
            reason: MoveReason::Requeue,
        };
        let target_id = match destination {
            Destination::Here(target_id) => *target_id,
            Destination::Elsewhere(target, partition) => {
                let history = history.map(|history| {
                    let ending = DeliveryEnding::Moved {
                        to: Box::new(target.clone()),
                    };
                    crate::history::ended_by_move(history, ending, now)
                });
                locked
                    .ops
                    .push(StoreOp::SendToInbox(Box::new(crate::store::SendToInbox {
                        from: (id, seq),
                        partition: *partition,
                        entry: Outbound {
                            target: target.clone(),
                            rule: ArrivalRule::Requeue,
                            state: moved,
                            moved_from: Some(moved_from),
                            redrive,
                            group,
                            history,
                        },
                    })));
                return Ok(false);
            }
        };
        let history = history.map(|history| {
            let to = locked.state.queues[&target_id].record.key.clone();
            crate::history::ended_by_move(history, DeliveryEnding::Moved { to: Box::new(to) }, now)
        });
        let arrival = Arrival {
            from: (id, seq),
            target: target_id,
            state: inbox::fresh(moved, now),
            moved_from,
            redrive,
            group,
            history,
        };
        let wake = Self::arrive(locked.state, arrival, now, &mut locked.ops);
        let target_index = locked.state.queues.get_mut(&target_id).expect("locked");
        target_index.counters.sends += 1;
        Ok(wake)
    }

    /// Takes a held message out of the index if `receipt` is its current one, with what travels with it.
    fn take_held(&self, index: &mut QueueIndex, receipt: &str) -> EngineResult<Held> {
        let receipt = self.decode_receipt(index.id(), receipt)?;
        Self::current(index, &receipt)?;
        let redrive = index.redrive(receipt.seq).cloned();
        // Read before the removal, which takes the message out of its group.
        let group = index.group_of(receipt.seq).map(str::to_owned);
        let history = index.history.take(receipt.seq);
        let state = index
            .remove(receipt.seq)
            .expect("current() found the message");
        Ok(Held {
            seq: receipt.seq,
            state,
            redrive,
            group,
            history,
        })
    }

    /// The settings a message policy's dead-letter queue is created with when it does not exist: the source
    /// queue's, less its own dead-letter and protocol settings (tags, metadata), as KubeMQ creates channels on
    /// use.
    pub(super) fn created_dead_letter_config(state: &State, source: QueueId) -> QueueConfig {
        QueueConfig {
            redrive_policy: None,
            protocol_settings: Default::default(),
            ..state.queues[&source].record.config.clone()
        }
    }
}

/// Where a message received too often goes.
pub(super) enum DeadLetterRoute {
    /// The queue's redrive policy names this queue.
    QueuePolicy(Destination),
    /// The message's own policy names this queue (it may have to be created).
    MessagePolicy(QueueKey),
    /// The message's own policy names no queue.
    Drop,
}

/// A queue a message can be moved to: one of this engine's, or one of another partition, reached through
/// that partition's inbox (crate::inbox).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Destination {
    Here(QueueId),
    Elsewhere(QueueKey, Partition),
}

/// Where a dead letter lands, and how it arrives.
enum Landing {
    Here(QueueId, ArrivalRule),
    Elsewhere(QueueKey, Partition, ArrivalRule),
}

/// A message on its way into another queue (a dead-letter move or a re-queue).
pub(super) struct Arrival {
    pub(super) from: (QueueId, Seq),
    pub(super) target: QueueId,
    pub(super) state: MessageState,
    /// Recorded in the payload: where the message came from, and why.
    pub(super) moved_from: MovedFrom,
    /// The message's own rule, kept by a re-queue.
    pub(super) redrive: Option<MessageRedrivePolicy>,
    /// Its group in the FIFO queue it leaves, kept in a FIFO target.
    pub(super) group: Option<String>,
    /// Its delivery history, last delivery already ended by the move; kept if the target records history.
    pub(super) history: Option<DeliveryHistory>,
}

/// A message received too often, taken out of its queue, on its way to where its rule sends it.
pub(super) struct DeadLetter {
    pub(super) seq: Seq,
    pub(super) state: MessageState,
    pub(super) route: DeadLetterRoute,
    /// Travels with the message (same id) and is written anew in the target.
    pub(super) history: Option<DeliveryHistory>,
    /// Its group in a FIFO source: a dead-letter move keeps the group (docs/semantics.md §4).
    pub(super) group: Option<String>,
}

/// A held message taken out of its queue to move elsewhere: its state, own rule and FIFO group.
struct Held {
    seq: Seq,
    state: MessageState,
    redrive: Option<MessageRedrivePolicy>,
    group: Option<String>,
    history: Option<DeliveryHistory>,
}
