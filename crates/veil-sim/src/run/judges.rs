//! Judging each answer against the model: an acknowledged change must already be durable, a delivery must
//! respect every window, delete and deduplication the model knows of, and a FIFO group its order
//! (docs/reliability.md, "Deterministic simulation"). An answer that is an error puts its request in doubt.

use std::collections::HashMap;

use veil_core::{DeleteOutcome, EngineResult, Message, Millis, QueueId, SentMessage, Seq, Updated};

use super::driver::{InFlight, Outcome, Request};
use super::model::{Delivered, Held, Msg};
use super::{tag_of, wire_receipt, Sim, Violation};
use crate::limits::*;
use crate::ops::*;

impl Sim<'_> {
    pub(super) fn judge(&mut self, flight: InFlight, outcome: Outcome) -> Result<(), Violation> {
        if outcome.succeeded() {
            self.stats.acknowledged += 1;
            if flight.store_failed {
                return Err(self.violation(
                    "success after the store failed",
                    format!(
                        "{:?} started at step {} after the store fail-stopped, yet was answered with success",
                        flight.request, flight.step
                    ),
                ));
            }
        }
        match outcome {
            Outcome::Sent(Ok(sent)) => self.judge_sent(&flight, sent.into_iter().map(Ok).collect()),
            Outcome::SentEach(Ok(results)) => self.judge_sent(&flight, results),
            Outcome::Received(Ok(messages)) => self.judge_received(&flight, messages),
            Outcome::Changed(Ok(until)) => {
                self.judge_changed(&flight, until);
                Ok(())
            }
            Outcome::Updated(Ok(updated)) => {
                self.judge_updated(&flight, updated);
                Ok(())
            }
            Outcome::Deleted(Ok(outcomes)) => self.judge_deleted(&flight, &outcomes),
            Outcome::Moved(Ok(())) => {
                let Request::Move { tag } = flight.request else {
                    unreachable!("a move answers a move")
                };
                self.note(|| format!("-> m{tag} moved"));
                self.expect_durable(tag, "acknowledged move not durable")
            }
            Outcome::Sent(Err(e))
            | Outcome::Received(Err(e))
            | Outcome::Changed(Err(e))
            | Outcome::Moved(Err(e))
            | Outcome::Driven(Err(e))
            | Outcome::Purged(Err(e))
            | Outcome::SentEach(Err(e))
            | Outcome::Deleted(Err(e))
            | Outcome::Updated(Err(e)) => {
                self.stats.errors += 1;
                self.note(|| format!("-> error (in doubt): {e}"));
                Ok(())
            }
            Outcome::TaskStarted(Err(e)) => {
                self.stats.errors += 1;
                self.note(|| format!("-> error: {e}"));
                Ok(())
            }
            Outcome::Purged(Ok(n)) => {
                self.note(|| format!("-> purged {n}"));
                Ok(())
            }
            Outcome::TaskStarted(Ok(task)) => {
                self.note(|| format!("-> task {} started, {} to move", task.number, task.to_move));
                Ok(())
            }
            Outcome::Driven(Ok(())) => Ok(()),
        }
    }

    fn judge_changed(&mut self, flight: &InFlight, until: Millis) {
        let Request::Change {
            tag,
            queue,
            receipt,
        } = &flight.request
        else {
            unreachable!("a change answers a change")
        };
        self.note(|| format!("-> m{tag} invisible until t+{}", until - CLOCK_START_MS));
        let ticks = (flight.tick, flight.tick);
        self.grant(*tag, ticks, until, receipt.clone(), Some(*queue));
    }

    fn judge_updated(&mut self, flight: &InFlight, updated: Updated) {
        let Request::Update {
            client,
            tag,
            queue,
            old_receipt,
        } = &flight.request
        else {
            unreachable!("an update answers an update")
        };
        for held in &mut self.clients[usize::from(*client)].held {
            if held.receipt == *old_receipt {
                held.receipt = wire_receipt(held.protocol, &held.message_id, &updated.receipt);
            }
        }
        self.note(|| format!("-> m{tag} updated, new receipt"));
        let ticks = (flight.tick, flight.tick);
        self.grant(
            *tag,
            ticks,
            updated.visible_at,
            updated.receipt,
            Some(*queue),
        );
    }

    fn judge_deleted(
        &mut self,
        flight: &InFlight,
        outcomes: &[EngineResult<DeleteOutcome>],
    ) -> Result<(), Violation> {
        let Request::Delete { tags } = &flight.request else {
            unreachable!("a delete answers a delete")
        };
        for (tag, result) in tags.iter().zip(outcomes) {
            if let Ok(DeleteOutcome::Deleted) = result {
                self.note(|| format!("-> m{tag} deleted"));
                if let Some(msg) = self.msgs.get_mut(tag) {
                    msg.deleted.get_or_insert(flight.tick);
                }
                if self.durable_tags().is_some_and(|d| d.contains_key(tag)) {
                    return Err(self.violation(
                        "acknowledged delete not durable",
                        format!("m{tag}'s delete was acknowledged while the store still holds it"),
                    ));
                }
            } else {
                self.note(|| format!("-> m{tag}: {result:?}"));
            }
        }
        Ok(())
    }

    fn judge_sent(
        &mut self,
        flight: &InFlight,
        results: Vec<EngineResult<SentMessage>>,
    ) -> Result<(), Violation> {
        let Request::Send {
            client,
            queue,
            tags,
        } = &flight.request
        else {
            unreachable!("a send answers a send")
        };
        let durable = self.durable_tags();
        for (&tag, result) in tags.iter().zip(results) {
            let sent = match result {
                Ok(sent) => sent,
                Err(error) => {
                    // Refused on its own (send_each): never stored.
                    self.note(|| format!("-> m{tag} refused: {error}"));
                    if let Some(msg) = self.msgs.get_mut(&tag) {
                        msg.never_stored = true;
                    }
                    continue;
                }
            };
            let retry_of = self.msgs[&tag].retry_of;
            if let Some(original) = retry_of {
                self.check_dedup(tag, original, flight, &sent)?;
            }
            if sent.duplicate {
                self.note(|| format!("-> m{tag} is a duplicate (not stored)"));
                if let Some(msg) = self.msgs.get_mut(&tag) {
                    msg.never_stored = true;
                }
                continue;
            }
            self.note(|| {
                format!(
                    "-> m{tag} stored as seq {} of {}",
                    sent.seq, QUEUE_NAMES[*queue]
                )
            });
            let tick = self.tick;
            let msg = self.msgs.get_mut(&tag).expect("registered at its send");
            msg.acked_tick = Some(tick);
            msg.message_id = Some(sent.message_id);
            msg.seq_in_origin = Some(sent.seq);
            self.by_id.insert(sent.message_id, tag);
            let gone = msg.maybe_gone.is_some();
            if durable.as_ref().is_some_and(|d| !d.contains_key(&tag))
                && !gone
                && !self.maybe_expired(tag)
            {
                return Err(self.violation(
                    "acknowledged send not durable",
                    format!(
                        "client {client}'s send of m{tag} to {} was acknowledged before the store held it",
                        QUEUE_NAMES[*queue]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A FIFO send repeated with the same deduplication id: inside the interval after an acknowledged first
    /// send it is that send's duplicate; after it, a message of its own.
    fn check_dedup(
        &self,
        tag: u64,
        original: u64,
        flight: &InFlight,
        sent: &SentMessage,
    ) -> Result<(), Violation> {
        let first = &self.msgs[&original];
        let (Some(acked_tick), Some(first_id)) = (first.acked_tick, first.message_id) else {
            return Ok(()); // the first send is in doubt: either answer is right
        };
        if acked_tick > flight.tick {
            return Ok(()); // the retry overtook the first send's answer
        }
        let forgotten_at = first.send_at + DEDUP_INTERVAL_MS;
        if flight.started_at < forgotten_at {
            if !sent.duplicate || sent.message_id != first_id {
                return Err(self.violation(
                    "deduplication",
                    format!(
                        "m{tag} repeats m{original}'s deduplication id {} ms after it, inside the {} ms interval, yet was stored as a new message",
                        flight.started_at - first.send_at,
                        DEDUP_INTERVAL_MS
                    ),
                ));
            }
        } else if sent.duplicate && sent.message_id == first_id {
            return Err(self.violation(
                "deduplication",
                format!(
                    "m{tag} repeats m{original}'s deduplication id {} ms after it, past the {} ms interval, yet was answered as its duplicate",
                    flight.started_at - first.send_at,
                    DEDUP_INTERVAL_MS
                ),
            ));
        }
        Ok(())
    }

    fn judge_received(
        &mut self,
        flight: &InFlight,
        messages: Vec<Message>,
    ) -> Result<(), Violation> {
        let Request::Receive {
            client,
            waits,
            ref attempt_id,
            ..
        } = flight.request
        else {
            unreachable!("a receive answers a receive")
        };
        // A retry of this receive's attempt that started after it may have reset the visibility of what it
        // delivered, to the retry's visibility: its window binds only until then.
        let retried_at = attempt_id
            .as_ref()
            .and_then(|id| self.attempt_started.get(id).copied())
            .filter(|&started| started > flight.tick);
        // A long poll may have delivered at any poll up to this answer; any other receive delivers in its
        // first poll.
        let granted_by = if waits { self.tick } else { flight.tick };
        if !messages.is_empty() {
            self.clients[usize::from(client)].attempt = None;
        }
        self.stats.deliveries += messages.len() as u64;
        let durable_states = self.durable_states();
        let mut delivered_here: Vec<Delivered> = Vec::new();
        let all_here: Vec<u64> = messages
            .iter()
            .filter_map(|m| tag_of(&m.payload.body))
            .collect();
        for message in &messages {
            let tag = self.check_delivery(
                flight,
                message,
                durable_states.as_ref(),
                (&delivered_here, &all_here),
            )?;
            delivered_here.push((tag, message.seq, message.payload.group.clone()));
        }
        for message in messages {
            self.record_delivery(flight, message, granted_by, retried_at);
        }
        Ok(())
    }

    /// Judges one delivery of an acknowledged receive against the model; returns the message's tag.
    fn check_delivery(
        &mut self,
        flight: &InFlight,
        message: &Message,
        durable_states: Option<&HashMap<(QueueId, Seq), u32>>,
        (delivered_here, all_here): (&[Delivered], &[u64]),
    ) -> Result<u64, Violation> {
        let Request::Receive {
            client,
            queue,
            visibility_ms,
            ..
        } = flight.request
        else {
            unreachable!("a receive answers a receive")
        };
        let Some(tag) = tag_of(&message.payload.body) else {
            return Err(self.violation(
                "unknown message delivered",
                format!("a body nobody sent: {:?}", message.payload.body),
            ));
        };
        let Some(msg) = self.msgs.get(&tag).cloned() else {
            return Err(self.violation(
                "unknown message delivered",
                format!("m{tag} was never sent"),
            ));
        };
        let delivered_at = message.state.visible_at.saturating_sub(visibility_ms);
        let receipt = message.receipt.clone().unwrap_or_default();
        self.note(|| {
            format!(
                "-> m{tag} (seq {}, receive count {}) to client {client}, invisible until t+{}",
                message.seq,
                message.state.receive_count,
                message.state.visible_at - CLOCK_START_MS
            )
        });
        self.check_not_hidden(tag, &msg, flight, message, (delivered_at, &receipt))?;
        if is_fifo(queue) {
            self.check_fifo(
                tag,
                queue,
                message,
                (flight.tick, delivered_at),
                (delivered_here, all_here),
            )?;
        }
        self.check_delivery_durable(tag, queue, message, durable_states)?;
        Ok(tag)
    }

    /// Nothing delivers what was never stored, deleted for good, or hidden by an acknowledged window; and a
    /// receive count never goes back.
    fn check_not_hidden(
        &self,
        tag: u64,
        msg: &Msg,
        flight: &InFlight,
        message: &Message,
        (delivered_at, receipt): (Millis, &str),
    ) -> Result<(), Violation> {
        let Request::Receive { client, .. } = flight.request else {
            unreachable!("a receive answers a receive")
        };
        if msg.never_stored {
            return Err(self.violation(
                "never-stored message delivered",
                format!("m{tag} was answered as a duplicate or refused, yet was delivered"),
            ));
        }
        if let Some(deleted) = msg.deleted.filter(|&d| d < flight.tick) {
            return Err(self.violation(
                "delivered after acknowledged delete",
                format!("m{tag}'s delete (started at tick {deleted}) was acknowledged, yet it was delivered again"),
            ));
        }
        if message.state.receive_count == 0
            || (!msg.moved_possible
                && message.state.generation > msg.generation_seen
                && message.state.receive_count < msg.receive_count_seen)
        {
            return Err(self.violation(
                "receive count went back",
                format!(
                    "m{tag} was delivered with receive count {} after an acknowledged delivery with {}",
                    message.state.receive_count, msg.receive_count_seen
                ),
            ));
        }
        if let Some(window) = &msg.window {
            if window.granted_by < flight.tick
                && msg.touched <= window.at
                && delivered_at < window.until
                && window.receipt != receipt
            {
                return Err(self.violation(
                    "delivered inside a visibility window",
                    format!(
                        "m{tag} was delivered at t+{} to client {client} although an acknowledged request kept it invisible until t+{}",
                        delivered_at - CLOCK_START_MS,
                        window.until - CLOCK_START_MS
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The delivery is durable: the store holds the message with this generation or a later one, or a later
    /// request has already removed or moved it.
    fn check_delivery_durable(
        &self,
        tag: u64,
        queue: usize,
        message: &Message,
        durable_states: Option<&HashMap<(QueueId, Seq), u32>>,
    ) -> Result<(), Violation> {
        if let Some(queue_id) = self.queue_id(queue) {
            match durable_states.and_then(|states| states.get(&(queue_id, message.seq))) {
                Some(generation) if *generation < message.state.generation => {
                    return Err(self.violation(
                        "acknowledged receive not durable",
                        format!(
                            "m{tag} was delivered with generation {} while the store holds generation {generation}",
                            message.state.generation
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// What an acknowledged delivery tells the model: the window it granted, where the message is, its receive
    /// count, and the receipt its client now holds.
    fn record_delivery(
        &mut self,
        flight: &InFlight,
        message: Message,
        granted_by: u64,
        retried_at: Option<u64>,
    ) {
        let Request::Receive {
            client,
            queue,
            protocol,
            ..
        } = flight.request
        else {
            unreachable!("a receive answers a receive")
        };
        let Some(tag) = tag_of(&message.payload.body) else {
            return;
        };
        let receipt = message.receipt.unwrap_or_default();
        let wire = wire_receipt(protocol, &message.payload.message_id, &receipt);
        self.grant(
            tag,
            (flight.tick, granted_by),
            message.state.visible_at,
            receipt.clone(),
            Some(queue),
        );
        self.add_location(tag, queue);
        if let Some(msg) = self.msgs.get_mut(&tag) {
            if let Some(retried_at) = retried_at {
                msg.touched = msg.touched.max(retried_at);
            }
            // Answers may come back in another order than the deliveries happened (a long poll started
            // earlier delivers later); the generation tells which delivery is the later one.
            if message.state.generation > msg.generation_seen {
                msg.generation_seen = message.state.generation;
                msg.receive_count_seen = message.state.receive_count;
            }
        }
        let held = &mut self.clients[usize::from(client)].held;
        held.retain(|h| h.tag != tag);
        held.push_back(Held {
            queue,
            tag,
            receipt: wire,
            protocol,
            message_id: message.payload.message_id,
        });
        if held.len() > HELD_RECEIPTS_MAX {
            held.pop_front();
        }
    }

    /// FIFO: a group delivers in send order, and one message of a group at a time.
    fn check_fifo(
        &self,
        tag: u64,
        queue: usize,
        message: &Message,
        (tick, delivered_at): (u64, Millis),
        (delivered_here, all_here): (&[Delivered], &[u64]),
    ) -> Result<(), Violation> {
        let group = message.payload.group.clone();
        if let Some((earlier, seq, _)) = delivered_here
            .iter()
            .find(|(_, seq, g)| *g == group && *seq > message.seq)
        {
            return Err(self.violation(
                "FIFO order",
                format!(
                    "one receive delivered m{earlier} (seq {seq}) before m{tag} (seq {}) of the same group",
                    message.seq
                ),
            ));
        }
        let msg = &self.msgs[&tag];
        for (&other_tag, other) in &self.msgs {
            if other_tag == tag || other.group != group {
                continue;
            }
            // One receive may take several of a group, in order (a retried attempt gets them all again).
            if all_here.contains(&other_tag) {
                continue;
            }
            // Gone by the time the answer came (a receive answers only what still exists when it reads the
            // payloads, after its commit): then the client never sees it, and nothing was out of order.
            let still_there = other.maybe_gone.is_none() && !self.maybe_expired(other_tag);
            if let Some(window) = &other.window {
                if window.queue == queue
                    && window.granted_by < tick
                    && other.touched <= window.at
                    && delivered_at < window.until
                    && still_there
                {
                    return Err(self.violation(
                        "two of a FIFO group in flight",
                        format!(
                            "m{tag} was delivered while m{other_tag} of its group {group:?} was in flight until t+{}",
                            window.until - CLOCK_START_MS
                        ),
                    ));
                }
            }
            // Order: an earlier message of the group, never moved, still there, holds this one back.
            let earlier = msg.origin == queue
                && other.origin == queue
                && !msg.moved_possible
                && !other.moved_possible
                && other.acked_tick.is_some_and(|t| t < tick)
                && other.seq_in_origin.is_some_and(|s| s < message.seq)
                && still_there;
            if earlier {
                return Err(self.violation(
                    "FIFO order",
                    format!(
                        "m{tag} (seq {}) was delivered while m{other_tag} (seq {:?}), sent before it in group {group:?}, is still in the queue",
                        message.seq, other.seq_in_origin
                    ),
                ));
            }
        }
        Ok(())
    }
}
