//! What the simulator knows from acknowledged answers: each sent message (where it may be, whether it may be
//! gone, the visibility window an answer granted) and each client's held receipts. Every update here only
//! widens what is possible for a message whose request is in doubt (docs/reliability.md, "Deterministic
//! simulation").

use std::collections::VecDeque;

use veil_core::{Clock, Millis, Seq};

use super::driver::Request;

use super::Sim;
use crate::ops::*;

/// A receipt a client holds.
#[derive(Clone, Debug)]
pub(super) struct Held {
    pub(super) queue: usize,
    pub(super) tag: u64,
    /// As the protocol hands it to its client: an Azure pop receipt (veil-azure's codec: message id and
    /// engine receipt), the engine's receipt otherwise. `decoded` turns it back into the engine's.
    pub(super) receipt: String,
    pub(super) protocol: Protocol,
    pub(super) message_id: [u8; 16],
}

#[derive(Default)]
pub(super) struct Client {
    pub(super) held: VecDeque<Held>,
    /// (tag, group, dedup id) of its last FIFO send, for a retry.
    pub(super) last_fifo_send: Option<(u64, u8, String)>,
    pub(super) attempt: Option<String>,
    pub(super) attempts_made: u64,
}

/// (tag, seq, group) of a message one receive delivered.
pub(super) type Delivered = (u64, Seq, Option<String>);

/// A visibility window granted by an acknowledged receive or change.
#[derive(Clone, Debug)]
pub(super) struct Window {
    /// Start tick of the request that granted it: a request naming the message after this may have changed
    /// the window.
    pub(super) at: u64,
    /// The latest tick at which the grant may have happened (a long poll delivers some time after it
    /// started): only requests that started after this are bound by the window.
    pub(super) granted_by: u64,
    pub(super) until: Millis,
    pub(super) queue: usize,
    pub(super) receipt: String,
}

/// What the model knows about one sent message (one send attempt: one tag, at most one stored message).
#[derive(Clone, Debug)]
pub(super) struct Msg {
    pub(super) origin: usize,
    pub(super) group: Option<String>,
    /// The tag of the send this one retried (same deduplication id).
    pub(super) retry_of: Option<u64>,
    pub(super) send_at: Millis,
    /// Tick at which its send was acknowledged as stored.
    pub(super) acked_tick: Option<u64>,
    pub(super) message_id: Option<[u8; 16]>,
    pub(super) seq_in_origin: Option<Seq>,
    pub(super) own_redrive: OwnRedrive,
    /// A move by its own rule may have happened, which clears the rule (the queue's policy applies after it).
    pub(super) own_rule_maybe_cleared: bool,
    /// Queues it may be in (a bit per queue): its origin, plus every move that may have happened.
    pub(super) locations: u8,
    /// An operation that may remove it for good started at this tick (delete, purge, drop by its rule).
    pub(super) maybe_gone: Option<u64>,
    /// An acknowledged delete removed it; the delete started at this tick.
    pub(super) deleted: Option<u64>,
    /// Acknowledged as a duplicate, or refused: never stored.
    pub(super) never_stored: bool,
    /// Receives that started on a queue it may be in: a bound on its receive count.
    pub(super) receives_seen: u32,
    /// It may have left its origin queue (a dead-letter move, a re-queue, a move task).
    pub(super) moved_possible: bool,
    /// The highest receive count an acknowledged delivery showed (counts reset only when a move makes a
    /// fresh message of it).
    pub(super) receive_count_seen: u32,
    /// The generation of that delivery.
    pub(super) generation_seen: u32,
    /// Latest start tick of a request that may have changed its visibility.
    pub(super) touched: u64,
    pub(super) window: Option<Window>,
}

impl Msg {
    pub(super) fn may_be_in(&self, queue: usize) -> bool {
        self.locations & (1 << queue) != 0
    }
}

impl Sim<'_> {
    pub(super) fn next_tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    pub(super) fn touch(&mut self, tag: u64) {
        let tick = self.tick;
        if let Some(msg) = self.msgs.get_mut(&tag) {
            msg.touched = tick;
        }
    }

    pub(super) fn maybe_gone(&mut self, tag: u64) {
        let tick = self.tick;
        if let Some(msg) = self.msgs.get_mut(&tag) {
            msg.touched = tick;
            msg.maybe_gone.get_or_insert(tick);
        }
    }

    pub(super) fn forget_held(&mut self, client: u8, tags: &[u64]) {
        self.clients[usize::from(client)]
            .held
            .retain(|h| !tags.contains(&h.tag));
    }

    pub(super) fn register(
        &mut self,
        tag: u64,
        queue: usize,
        group: Option<String>,
        retry_of: Option<u64>,
        own_redrive: OwnRedrive,
    ) {
        let msg = Msg {
            origin: queue,
            group,
            retry_of,
            send_at: self.clock.now(),
            acked_tick: None,
            message_id: None,
            seq_in_origin: None,
            own_redrive,
            own_rule_maybe_cleared: false,
            locations: 1 << queue,
            maybe_gone: None,
            deleted: None,
            never_stored: false,
            receives_seen: 0,
            moved_possible: false,
            receive_count_seen: 0,
            generation_seen: 0,
            touched: 0,
            window: None,
        };
        self.msgs.insert(tag, msg);
        // A long poll already waiting on the queue may receive it (and its dead-letter rule may follow).
        self.waiting_receives_may_reach(tag, queue);
    }

    /// Each long poll waiting on `queue` may receive message `tag`, which just became deliverable there.
    pub(super) fn waiting_receives_may_reach(&mut self, tag: u64, queue: usize) {
        let waiting = self
            .inflight
            .iter()
            .filter(|f| matches!(f.request, Request::Receive { queue: q, waits: true, .. } if q == queue))
            .count();
        for _ in 0..waiting {
            self.receive_may_reach(tag, queue);
        }
    }

    /// What a receive of `queue` may do to message `tag` beyond delivering it: count a receive, and once the
    /// count may have reached a dead-letter threshold, move it (the queue's policy or its own) or drop it (its
    /// own policy without a queue).
    pub(super) fn receive_may_reach(&mut self, tag: u64, queue: usize) {
        let setup = &self.scenario.setup;
        let queue_policy = match queue {
            STANDARD => Some((DEAD_LETTERS, setup.max_receive_count[0])),
            FIFO if setup.fifo_redrive => Some((FIFO_DEAD_LETTERS, setup.max_receive_count[1])),
            _ => None,
        };
        // On a standard queue a KubeMQ receive releases a used-up delivery into the dead-letter queue as soon
        // as it lapses (any later request of the queue, or a sweep, moves it), so the receive that uses up the
        // count already may lead to a move; a FIFO queue's receives (SQS) move only on the next receive.
        let used_up = |seen: u32, n: u32| if is_fifo(queue) { seen > n } else { seen >= n };
        let tick = self.tick;
        let Some(msg) = self.msgs.get_mut(&tag) else {
            return;
        };
        msg.receives_seen += 1;
        let by_own_rule = match msg.own_redrive {
            OwnRedrive::ToQueue(n) if used_up(msg.receives_seen, n) => {
                // A move by its own rule makes a fresh message without the rule: from then on the queue's
                // policy applies to it (a re-queue may take it to a queue that has one).
                msg.own_rule_maybe_cleared = true;
                Some(OWN_DEAD_LETTERS)
            }
            OwnRedrive::Drop(n) if used_up(msg.receives_seen, n) => {
                msg.maybe_gone.get_or_insert(tick);
                None
            }
            _ => None,
        };
        let by_queue_policy = (msg.own_redrive == OwnRedrive::None || msg.own_rule_maybe_cleared)
            .then_some(queue_policy)
            .flatten()
            .filter(|(_, n)| used_up(msg.receives_seen, *n))
            .map(|(target, _)| target);
        for target in [by_own_rule, by_queue_policy].into_iter().flatten() {
            if let Some(msg) = self.msgs.get_mut(&tag) {
                msg.moved_possible = true;
            }
            self.add_location(tag, target);
        }
    }

    /// Message `tag` may now be in `queue` too; a long poll already waiting there may receive it.
    pub(super) fn add_location(&mut self, tag: u64, queue: usize) {
        let Some(msg) = self.msgs.get_mut(&tag) else {
            return;
        };
        if msg.may_be_in(queue) {
            return;
        }
        msg.locations |= 1 << queue;
        self.waiting_receives_may_reach(tag, queue);
    }

    /// A move task may move any message of a dead-letter queue back to its source or to `EVENTS`.
    pub(super) fn move_task_may_move(&mut self) {
        let tags: Vec<(u64, usize)> = self
            .msgs
            .iter()
            .flat_map(|(&tag, m)| {
                let from_dl = m
                    .may_be_in(DEAD_LETTERS)
                    .then_some([(tag, STANDARD), (tag, EVENTS)]);
                let from_fdl = m
                    .may_be_in(FIFO_DEAD_LETTERS)
                    .then_some([(tag, FIFO), (tag, EVENTS)]);
                from_dl.into_iter().chain(from_fdl).flatten()
            })
            .collect();
        for (tag, target) in tags {
            if let Some(msg) = self.msgs.get_mut(&tag) {
                msg.moved_possible = true;
            }
            self.add_location(tag, target);
        }
    }

    /// Records a visibility window granted by an acknowledged request that started at tick `at` and made
    /// the grant by tick `granted_by`.
    pub(super) fn grant(
        &mut self,
        tag: u64,
        (at, granted_by): (u64, u64),
        until: Millis,
        receipt: String,
        queue: Option<usize>,
    ) {
        if let Some(msg) = self.msgs.get_mut(&tag) {
            if msg.window.as_ref().is_none_or(|w| w.at < at) {
                let queue = queue
                    .or_else(|| msg.window.as_ref().map(|w| w.queue))
                    .unwrap_or(msg.origin);
                msg.window = Some(Window {
                    at,
                    granted_by,
                    until,
                    queue,
                    receipt,
                });
            }
        }
    }

    /// The message may have expired by `at`: its earliest possible expiry is its send plus the shortest
    /// retention of any queue it may be in (a dead-letter move counts retention from the send too).
    pub(super) fn maybe_expired_at(&self, tag: u64, at: Millis) -> bool {
        let msg = &self.msgs[&tag];
        let retention = (0..QUEUE_NAMES.len())
            .filter(|&q| msg.may_be_in(q))
            .map(|q| self.scenario.setup.retention_ms[q])
            .min()
            .unwrap_or(0);
        at >= msg.send_at.saturating_add(retention)
    }

    pub(super) fn maybe_expired(&self, tag: u64) -> bool {
        self.maybe_expired_at(tag, self.clock.now())
    }
}
