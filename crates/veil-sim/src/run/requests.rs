//! Each generated operation made into what it is: an engine request started the way its protocol's front-end
//! would start it (receipt rule, pop-receipt decoding, dead-letter timing), a clock step, or a fault. Before a
//! request starts, the model widens what it may do to the messages it names (`model.rs`).

use veil_core::{
    DeadLetterTiming, MessageRedrivePolicy, Millis, NewMessage, ReceiptRule, ReceiveOptions,
    VisibilityChange,
};

use super::driver::{Outcome, Pending, Request};
use super::model::Held;
use super::{body, key, receipt_rule, Sim, Violation};
use crate::limits::*;
use crate::ops::*;

impl Sim<'_> {
    pub(super) fn execute(&mut self, op: &Op) -> Result<(), Violation> {
        self.tick += 1;
        match *op {
            Op::Send {
                client,
                queue,
                count,
                each,
                group,
                delay_ms,
                redrive,
            } => self.send(client, queue, count, each, group, delay_ms, redrive),
            Op::Retry { client } => self.retry(client),
            Op::Receive {
                client,
                queue,
                max,
                visibility_ms,
                wait_ms,
                protocol,
                attempt,
            } => self.receive(
                client,
                queue,
                max,
                visibility_ms,
                wait_ms,
                protocol,
                attempt,
            ),
            Op::ChangeVisibility {
                client,
                pick,
                visibility_ms,
            } => self.change_visibility(client, pick, visibility_ms),
            Op::Update {
                client,
                pick,
                visibility_ms,
            } => self.update(client, pick, visibility_ms),
            Op::Delete {
                client,
                pick,
                batch,
            } => self.delete(client, pick, batch),
            Op::Move {
                client,
                pick,
                target,
            } => self.requeue(client, pick, target),
            Op::Purge { queue } => self.purge(queue),
            Op::StartMoveTask { queue, to_origin } => self.start_move_task(queue, to_origin),
            Op::DriveMoveTasks => {
                self.move_task_may_move();
                let engine = self.engine.clone();
                let future =
                    Box::pin(async move { Outcome::Driven(engine.drive_move_tasks().await) });
                self.start(Request::Other, future)
            }
            Op::Sweep => {
                self.engine.sweep();
                Ok(())
            }
            Op::Advance { ms } => {
                self.clock.advance_ms(ms);
                Ok(())
            }
            Op::Jump { ms } => {
                // Forward only: the Clock contract gives no monotonicity guarantee, but every clock Veil runs
                // on (the system clock, the manual one) is read as time that does not go back; a backward
                // step is an operator's error the engine does not claim to survive.
                self.stats.clock_jumps += 1;
                self.clock.advance_ms(ms);
                Ok(())
            }
            Op::Flush { count } => self.flush(count),
            Op::FailCommit { reached_disk } => {
                if self.store.fail(reached_disk) {
                    self.stats.commit_failures += 1;
                }
                Ok(())
            }
            Op::Crash { kept } => self.crash(usize::from(kept)),
        }
    }

    fn change_visibility(
        &mut self,
        client: u8,
        pick: u16,
        visibility_ms: Millis,
    ) -> Result<(), Violation> {
        let Some(held) = self.held(client, pick)? else {
            return Ok(());
        };
        self.touch(held.tag);
        let change = VisibilityChange {
            visibility_ms,
            since_receive_ms_max: (held.protocol != Protocol::Azure)
                .then_some(SINCE_RECEIVE_MS_MAX),
            not_past_expiry: held.protocol == Protocol::Azure,
            receipts: receipt_rule(held.protocol, held.queue),
        };
        let engine = self.engine.clone();
        let receipt = held.receipt.clone();
        let future = Box::pin(async move {
            Outcome::Changed(
                engine
                    .change_visibility(&key(held.queue), &receipt, change)
                    .await,
            )
        });
        self.start(
            Request::Change {
                tag: held.tag,
                queue: held.queue,
                receipt: held.receipt,
            },
            future,
        )
    }

    /// Azure's update: a new visibility, body and receipt.
    fn update(&mut self, client: u8, pick: u16, visibility_ms: Millis) -> Result<(), Violation> {
        let Some(held) = self.held(client, pick)? else {
            return Ok(());
        };
        self.touch(held.tag);
        let change = VisibilityChange {
            visibility_ms,
            since_receive_ms_max: None,
            not_past_expiry: true,
            receipts: ReceiptRule::Current,
        };
        let engine = self.engine.clone();
        let receipt = held.receipt.clone();
        let new_body = bytes::Bytes::from(format!("m{}u", held.tag));
        let future = Box::pin(async move {
            Outcome::Updated(
                engine
                    .update(&key(held.queue), &receipt, change, Some(new_body))
                    .await,
            )
        });
        let old_receipt = self.clients[usize::from(client)]
            .held
            .iter()
            .find(|h| h.tag == held.tag)
            .map(|h| h.receipt.clone())
            .unwrap_or_default();
        self.start(
            Request::Update {
                client,
                tag: held.tag,
                queue: held.queue,
                old_receipt,
            },
            future,
        )
    }

    fn delete(&mut self, client: u8, pick: u16, batch: bool) -> Result<(), Violation> {
        let Some(picked) = self.held(client, pick)? else {
            return Ok(());
        };
        let chosen: Vec<Held> = if batch {
            let same_queue: Vec<Held> = self.clients[usize::from(client)]
                .held
                .iter()
                .filter(|h| h.queue == picked.queue)
                .cloned()
                .collect();
            same_queue
                .iter()
                .map(|h| self.decoded(h))
                .collect::<Result<_, _>>()?
        } else {
            vec![picked.clone()]
        };
        let tags: Vec<u64> = chosen.iter().map(|h| h.tag).collect();
        for &tag in &tags {
            self.maybe_gone(tag);
        }
        self.forget_held(client, &tags);
        let rule = receipt_rule(picked.protocol, picked.queue);
        let engine = self.engine.clone();
        let receipts: Vec<String> = chosen.into_iter().map(|h| h.receipt).collect();
        let future = Box::pin(async move {
            let refs: Vec<&str> = receipts.iter().map(String::as_str).collect();
            Outcome::Deleted(engine.delete_batch(&key(picked.queue), &refs, rule).await)
        });
        self.start(Request::Delete { tags }, future)
    }

    /// KubeMQ's re-queue of a held message to another queue.
    fn requeue(&mut self, client: u8, pick: u16, target: usize) -> Result<(), Violation> {
        let Some(held) = self.held(client, pick)? else {
            return Ok(());
        };
        if held.queue == target {
            return Ok(());
        }
        self.touch(held.tag);
        if let Some(msg) = self.msgs.get_mut(&held.tag) {
            msg.moved_possible = true;
        }
        self.add_location(held.tag, target);
        self.forget_held(client, &[held.tag]);
        let engine = self.engine.clone();
        let future = Box::pin(async move {
            Outcome::Moved(
                engine
                    .move_message(&key(held.queue), &held.receipt, &key(target))
                    .await,
            )
        });
        self.start(Request::Move { tag: held.tag }, future)
    }

    fn purge(&mut self, queue: usize) -> Result<(), Violation> {
        let tags: Vec<u64> = self
            .msgs
            .iter()
            .filter(|(_, m)| m.may_be_in(queue))
            .map(|(t, _)| *t)
            .collect();
        for tag in tags {
            self.maybe_gone(tag);
        }
        let engine = self.engine.clone();
        let future =
            Box::pin(async move { Outcome::Purged(engine.purge(&key(queue), None).await) });
        self.start(Request::Other, future)
    }

    fn start_move_task(&mut self, queue: usize, to_origin: bool) -> Result<(), Violation> {
        self.move_task_may_move();
        let engine = self.engine.clone();
        let future = Box::pin(async move {
            let destination = (!to_origin).then(|| key(EVENTS));
            Outcome::TaskStarted(
                engine
                    .start_move_task(&key(queue), destination.as_ref(), None)
                    .await,
            )
        });
        self.start(Request::Other, future)
    }

    /// The disk catches up with `count` pending commits (0: all of them, and then the store is idle and the
    /// statistics are compared with a recount).
    fn flush(&mut self, count: u8) -> Result<(), Violation> {
        // The server restarts a failed store once its disk takes writes again (docs/reliability.md "Storage
        // faults"); over the simulated disk that is the flush's meaning, or most of a run would be refusals.
        if self.store.failed() && self.store.restarts_when_failed() {
            return self.crash(0);
        }
        let count = if count == 0 {
            usize::MAX
        } else {
            usize::from(count)
        };
        if self.store.flush(count) > 0 {
            self.stats.flushes += 1;
        }
        self.poll_all()?;
        if count == usize::MAX {
            self.check_quiescent()?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn send(
        &mut self,
        client: u8,
        queue: usize,
        count: u8,
        each: bool,
        group: u8,
        delay_ms: Option<Millis>,
        redrive: OwnRedrive,
    ) -> Result<(), Violation> {
        let fifo = is_fifo(queue);
        let mut messages = Vec::new();
        let mut tags = Vec::new();
        for _ in 0..count {
            let tag = self.next_tag();
            let mut message = NewMessage::new(body(tag));
            message.sender_id = format!("client{client}");
            message.delay_ms = delay_ms;
            message.group = fifo.then(|| format!("g{group}"));
            message.dedup_id = fifo.then(|| format!("d{tag}"));
            message.redrive = match redrive {
                OwnRedrive::None => None,
                OwnRedrive::ToQueue(n) => Some(MessageRedrivePolicy {
                    max_receive_count: n,
                    dead_letter_queue: Some(key(OWN_DEAD_LETTERS)),
                }),
                OwnRedrive::Drop(n) => Some(MessageRedrivePolicy {
                    max_receive_count: n,
                    dead_letter_queue: None,
                }),
            };
            if fifo {
                self.clients[usize::from(client)].last_fifo_send =
                    Some((tag, group, format!("d{tag}")));
            }
            self.register(tag, queue, message.group.clone(), None, redrive);
            messages.push(message);
            tags.push(tag);
        }
        let engine = self.engine.clone();
        let future: Pending = if each {
            Box::pin(
                async move { Outcome::SentEach(engine.send_each(&key(queue), messages).await) },
            )
        } else {
            Box::pin(async move { Outcome::Sent(engine.send(&key(queue), messages).await) })
        };
        self.start(
            Request::Send {
                client,
                queue,
                tags,
            },
            future,
        )
    }

    pub(super) fn retry(&mut self, client: u8) -> Result<(), Violation> {
        let Some((original, group, dedup_id)) =
            self.clients[usize::from(client)].last_fifo_send.clone()
        else {
            return Ok(());
        };
        let tag = self.next_tag();
        let mut message = NewMessage::new(body(tag));
        message.group = Some(format!("g{group}"));
        message.dedup_id = Some(dedup_id);
        self.register(
            tag,
            FIFO,
            message.group.clone(),
            Some(original),
            OwnRedrive::None,
        );
        let engine = self.engine.clone();
        let future =
            Box::pin(async move { Outcome::Sent(engine.send(&key(FIFO), vec![message]).await) });
        self.start(
            Request::Send {
                client,
                queue: FIFO,
                tags: vec![tag],
            },
            future,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn receive(
        &mut self,
        client: u8,
        queue: usize,
        max: u8,
        visibility_ms: Millis,
        wait_ms: Millis,
        protocol: Protocol,
        attempt: bool,
    ) -> Result<(), Violation> {
        let tags: Vec<u64> = self
            .msgs
            .iter()
            .filter(|(_, m)| m.may_be_in(queue))
            .map(|(t, _)| *t)
            .collect();
        for tag in tags {
            self.receive_may_reach(tag, queue);
        }
        let client_state = &mut self.clients[usize::from(client)];
        let attempt_id = attempt.then(|| {
            client_state
                .attempt
                .get_or_insert_with(|| {
                    client_state.attempts_made += 1;
                    format!("a{client}-{}", client_state.attempts_made)
                })
                .clone()
        });
        if let Some(id) = &attempt_id {
            self.attempt_started.insert(id.clone(), self.tick);
        }
        let options = ReceiveOptions {
            max_messages: usize::from(max),
            visibility_ms: Some(visibility_ms),
            wait_ms: Some(wait_ms),
            dead_letter: if protocol == Protocol::KubeMq {
                DeadLetterTiming::OnRelease
            } else {
                DeadLetterTiming::OnReceive
            },
            attempt_id: attempt_id.clone(),
            consumer: None,
        };
        let engine = self.engine.clone();
        let future =
            Box::pin(async move { Outcome::Received(engine.receive(&key(queue), options).await) });
        self.start(
            Request::Receive {
                client,
                queue,
                visibility_ms,
                protocol,
                waits: wait_ms > 0,
                attempt_id,
            },
            future,
        )
    }
}
