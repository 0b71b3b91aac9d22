//! A coalesced batch (`plan::Batch`) as multi-row statements: each kind of change is one statement over
//! arrays (`unnest`), written in the order `plan`'s equivalence rests on, and left out when the batch has
//! none of it. A group of a few hundred operations is thus ~5 statements instead of a few hundred. Delivery
//! histories live in the state row (migrations/V3__narrow_state.sql), so they ride on the insert or on the
//! state update of their message.

use tokio_postgres::Statement;
use veil_core::{DeliveryHistory, MessageState, StoreError};

use super::plan::{Batch, MessageWrite};
use super::sql::{big, encode, encode_opt, p, payload_rest, BatchStatements, Params};

/// The statements, prepared once per writer connection.
pub mod sql {
    pub const DELETE_DEDUPS: &str = "DELETE FROM veil_dedup m \
         USING unnest($1::bigint[], $2::text[]) AS d(queue, key) WHERE m.queue = d.queue AND m.key = d.key";
    pub const PUT_DEDUPS: &str = "INSERT INTO veil_dedup (queue, key, sent_at, message_id, seq) \
         SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bytea[], $5::bigint[]) \
         ON CONFLICT (queue, key) DO UPDATE SET \
         sent_at = EXCLUDED.sent_at, message_id = EXCLUDED.message_id, seq = EXCLUDED.seq";
    /// A message's state (with its history) and body, gone together.
    pub const DELETE_MESSAGES: &str =
        "WITH d AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS d(queue, seq)), \
         s AS (DELETE FROM veil_state m USING d WHERE m.queue = d.queue AND m.seq = d.seq) \
         DELETE FROM veil_body m USING d WHERE m.queue = d.queue AND m.seq = d.seq";
    /// New messages (or messages replaced whole): their states and their bodies in one statement. A message
    /// replaced whole keeps its history unless the batch writes one.
    pub const INSERT_MESSAGES: &str = "WITH r AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], \
         $3::bytea[], $4::bytea[], $5::text[], $6::bytea[], $7::bigint[], $8::bytea[], $9::bytea[], $10::bytea[], \
         $11::bytea[], $12::bytea[]) AS r(queue, seq, state, redrive, fifo_group, message_id, sent_at, moved_from, \
         attrs, body_md5, body, history)), \
         s AS (INSERT INTO veil_state (queue, seq, state, redrive, fifo_group, history) \
         SELECT queue, seq, state, redrive, fifo_group, history FROM r ON CONFLICT (queue, seq) DO UPDATE SET \
         state = EXCLUDED.state, redrive = EXCLUDED.redrive, fifo_group = EXCLUDED.fifo_group, \
         history = coalesce(EXCLUDED.history, veil_state.history)) \
         INSERT INTO veil_body (queue, seq, message_id, sent_at, moved_from, attrs, body_md5, body) \
         SELECT queue, seq, message_id, sent_at, moved_from, attrs, body_md5, body FROM r \
         ON CONFLICT (queue, seq) DO UPDATE SET message_id = EXCLUDED.message_id, \
         sent_at = EXCLUDED.sent_at, moved_from = EXCLUDED.moved_from, attrs = EXCLUDED.attrs, \
         body_md5 = EXCLUDED.body_md5, body = EXCLUDED.body";
    /// States and delivery histories of messages the batch did not insert (NULL: unchanged); a message that
    /// is gone gets neither (as in veil-store, only a stored message has a history).
    pub const PUT_STATES: &str = "UPDATE veil_state m SET state = coalesce(u.state, m.state), \
         history = coalesce(u.history, m.history) \
         FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[]) AS u(queue, seq, state, history) \
         WHERE m.queue = u.queue AND m.seq = u.seq";
    pub const PUT_BODIES: &str = "UPDATE veil_body m SET body = u.body, body_md5 = u.body_md5 \
         FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[]) AS u(queue, seq, body, body_md5) \
         WHERE m.queue = u.queue AND m.seq = u.seq";
    pub const PUT_COUNTERS: &str = "UPDATE veil_queue q SET sends = u.sends, deliveries = u.deliveries, \
         redeliveries = u.redeliveries, deletes = u.deletes, expiries = u.expiries, \
         dead_letter_moves = u.dead_letter_moves, dead_letter_drops = u.dead_letter_drops, \
         purges = u.purges, moves_out = u.moves_out \
         FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], \
         $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[]) AS u(id, sends, deliveries, redeliveries, \
         deletes, expiries, dead_letter_moves, dead_letter_drops, purges, moves_out) WHERE q.id = u.id";
}

/// A column of a multi-row statement.
type Column<T> = Vec<T>;

/// The batch's statements with their array parameters, in the order they must run.
pub fn statements(
    prepared: &BatchStatements,
    batch: Batch,
) -> Result<Vec<(Statement, Params)>, StoreError> {
    let mut out = Vec::new();
    dedups(prepared, &batch, &mut out);
    messages(prepared, &batch, &mut out)?;
    counters(prepared, &batch, &mut out);
    Ok(out)
}

fn dedups(prepared: &BatchStatements, batch: &Batch, out: &mut Vec<(Statement, Params)>) {
    let (mut gone_queues, mut gone_keys): (Column<i64>, Column<String>) = Default::default();
    let mut put = DedupPuts::default();
    for ((queue, key), entry) in &batch.dedup {
        match entry {
            None => {
                gone_queues.push(big(*queue));
                gone_keys.push(key.clone());
            }
            Some(entry) => {
                put.queue.push(big(*queue));
                put.key.push(key.clone());
                put.sent_at.push(big(entry.sent_at));
                put.message_id.push(entry.message_id.to_vec());
                put.seq.push(big(entry.seq));
            }
        }
    }
    if !gone_queues.is_empty() {
        out.push((
            prepared.delete_dedups.clone(),
            vec![p(gone_queues), p(gone_keys)],
        ));
    }
    if !put.queue.is_empty() {
        let params = vec![
            p(put.queue),
            p(put.key),
            p(put.sent_at),
            p(put.message_id),
            p(put.seq),
        ];
        out.push((prepared.put_dedups.clone(), params));
    }
}

/// The columns of [`sql::PUT_DEDUPS`].
#[derive(Default)]
struct DedupPuts {
    queue: Column<i64>,
    key: Column<String>,
    sent_at: Column<i64>,
    message_id: Column<Vec<u8>>,
    seq: Column<i64>,
}

/// The columns of [`sql::PUT_BODIES`].
#[derive(Default)]
struct Bodies {
    queue: Column<i64>,
    seq: Column<i64>,
    body: Column<Vec<u8>>,
    body_md5: Column<Vec<u8>>,
}

/// Deletes, then inserts, then updates of states (with histories) and of bodies. A history goes with its
/// message's insert, or with its state's update (the history alone when the state is unchanged).
fn messages(
    prepared: &BatchStatements,
    batch: &Batch,
    out: &mut Vec<(Statement, Params)>,
) -> Result<(), StoreError> {
    let mut deleted: (Column<i64>, Column<i64>) = Default::default();
    let mut inserted = Inserts::default();
    let mut updated = Updates::default();
    let mut bodies = Bodies::default();
    for (key, write) in &batch.messages {
        let (queue, seq) = (big(key.0), big(key.1));
        let history = batch.histories.get(key);
        match write {
            MessageWrite::Delete => {
                deleted.0.push(queue);
                deleted.1.push(seq);
            }
            MessageWrite::Insert(message) => inserted.push(queue, seq, message, history)?,
            MessageWrite::Update { state, body } => {
                if state.is_some() || history.is_some() {
                    updated.push(queue, seq, state.as_ref(), history)?;
                }
                if let Some((body, md5)) = body {
                    bodies.queue.push(queue);
                    bodies.seq.push(seq);
                    bodies.body.push(body.to_vec());
                    bodies.body_md5.push(md5.to_vec());
                }
            }
        }
    }
    for (key, history) in &batch.histories {
        if !batch.messages.contains_key(key) {
            updated.push(big(key.0), big(key.1), None, Some(history))?;
        }
    }
    if !deleted.0.is_empty() {
        out.push((
            prepared.delete_messages.clone(),
            vec![p(deleted.0), p(deleted.1)],
        ));
    }
    if !inserted.queue.is_empty() {
        out.push((prepared.insert_messages.clone(), inserted.params()));
    }
    if !updated.queue.is_empty() {
        out.push((
            prepared.put_states.clone(),
            vec![
                p(updated.queue),
                p(updated.seq),
                p(updated.state),
                p(updated.history),
            ],
        ));
    }
    if !bodies.queue.is_empty() {
        let params = vec![
            p(bodies.queue),
            p(bodies.seq),
            p(bodies.body),
            p(bodies.body_md5),
        ];
        out.push((prepared.put_bodies.clone(), params));
    }
    Ok(())
}

/// The columns of [`sql::PUT_STATES`].
#[derive(Default)]
struct Updates {
    queue: Column<i64>,
    seq: Column<i64>,
    state: Column<Option<Vec<u8>>>,
    history: Column<Option<Vec<u8>>>,
}

impl Updates {
    fn push(
        &mut self,
        queue: i64,
        seq: i64,
        state: Option<&MessageState>,
        history: Option<&DeliveryHistory>,
    ) -> Result<(), StoreError> {
        self.queue.push(queue);
        self.seq.push(seq);
        self.state.push(state.map(encode).transpose()?);
        self.history.push(history.map(encode).transpose()?);
        Ok(())
    }
}

/// The columns of [`sql::INSERT_MESSAGES`].
#[derive(Default)]
struct Inserts {
    queue: Column<i64>,
    seq: Column<i64>,
    state: Column<Vec<u8>>,
    redrive: Column<Option<Vec<u8>>>,
    fifo_group: Column<Option<String>>,
    message_id: Column<Vec<u8>>,
    sent_at: Column<i64>,
    moved_from: Column<Option<Vec<u8>>>,
    attrs: Column<Vec<u8>>,
    body_md5: Column<Vec<u8>>,
    body: Column<Vec<u8>>,
    history: Column<Option<Vec<u8>>>,
}

impl Inserts {
    fn push(
        &mut self,
        queue: i64,
        seq: i64,
        message: &super::plan::NewMessage,
        history: Option<&DeliveryHistory>,
    ) -> Result<(), StoreError> {
        let payload = &message.payload;
        self.queue.push(queue);
        self.seq.push(seq);
        self.state.push(encode(&message.state)?);
        self.redrive.push(encode_opt(&message.redrive)?);
        self.fifo_group.push(message.fifo_group.clone());
        self.message_id.push(payload.message_id.to_vec());
        self.sent_at.push(big(payload.sent_at));
        self.moved_from.push(encode_opt(&payload.moved_from)?);
        self.attrs.push(payload_rest(payload)?);
        self.body_md5.push(payload.body_md5.to_vec());
        self.body.push(payload.body.to_vec());
        self.history.push(history.map(encode).transpose()?);
        Ok(())
    }

    fn params(self) -> Params {
        vec![
            p(self.queue),
            p(self.seq),
            p(self.state),
            p(self.redrive),
            p(self.fifo_group),
            p(self.message_id),
            p(self.sent_at),
            p(self.moved_from),
            p(self.attrs),
            p(self.body_md5),
            p(self.body),
            p(self.history),
        ]
    }
}

fn counters(prepared: &BatchStatements, batch: &Batch, out: &mut Vec<(Statement, Params)>) {
    if batch.counters.is_empty() {
        return;
    }
    let mut columns: [Column<i64>; 10] = Default::default();
    for (&queue, c) in &batch.counters {
        let row = [
            queue,
            c.sends,
            c.deliveries,
            c.redeliveries,
            c.deletes,
            c.expiries,
            c.dead_letter_moves,
            c.dead_letter_drops,
            c.purges,
            c.moves_out,
        ];
        for (column, value) in columns.iter_mut().zip(row) {
            column.push(big(value));
        }
    }
    out.push((
        prepared.put_counters.clone(),
        columns.into_iter().map(p).collect(),
    ));
}
