//! The SQL of the store (tables in migrations/V1__store.sql): one prepared statement per kind of change, how
//! each `StoreOp` becomes its statement's parameters, and how rows decode back into veil-core's types. The
//! statements mirror veil-store's `tables.rs` (and veil-core's memory store) operation by operation.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};
use veil_core::inbox::Inbound;
use veil_core::store::{AcceptInbound, ForwardInbound, MoveMessage};
use veil_core::{
    Attributes, Counters, DedupEntry, DeliveryHistory, MessageRedrivePolicy, MessageState,
    MoveTaskRecord, MovedFrom, Payload, QueueId, QueueKey, QueueRecord, Seq, StoreError, StoreOp,
};

use super::Scope;
use crate::connect::db_error;
use crate::partition::partition_of;

/// A u64 id, sequence number or time as PostgreSQL's bigint, bit for bit (values past `i64::MAX`, such as a
/// never-expiring time, come back unchanged).
pub fn big(value: u64) -> i64 {
    value as i64
}

pub fn unbig(value: i64) -> u64 {
    value as u64
}

pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StoreError> {
    postcard::to_stdvec(value)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode a record: {e}")))
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    postcard::from_bytes(bytes)
        .map_err(|e| StoreError::Corrupt(format!("cannot decode {what}: {e}")))
}

/// The part of a payload kept as one postcard value (`veil_body.attrs`); the body, its MD5, the message
/// id, the send time and the move origin have columns of their own.
#[derive(Serialize)]
struct PayloadRestRef<'a> {
    attributes: &'a Attributes,
    sender_id: &'a str,
    group: &'a Option<String>,
    dedup_id: &'a Option<String>,
}

/// [`PayloadRestRef`] as read back (same encoding).
#[derive(Deserialize)]
struct PayloadRest {
    attributes: Attributes,
    sender_id: String,
    group: Option<String>,
    dedup_id: Option<String>,
}

const PUT_QUEUE: &str =
    "INSERT INTO veil_queue (id, namespace, name, record, partition) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (id) DO UPDATE SET namespace = EXCLUDED.namespace, name = EXCLUDED.name, record = EXCLUDED.record";
/// The queue, its messages (state with history, body) and its deduplication ids.
const DELETE_QUEUE: &str = "WITH q AS (DELETE FROM veil_queue WHERE id = $1), \
     d AS (DELETE FROM veil_dedup WHERE queue = $1), s AS (DELETE FROM veil_state WHERE queue = $1) \
     DELETE FROM veil_body WHERE queue = $1";
const PURGE_QUEUE: &str =
    "WITH s AS (DELETE FROM veil_state WHERE queue = $1) DELETE FROM veil_body WHERE queue = $1";
/// Deletes the message (and its history) and inserts it at its new place with its new state, rule, group and
/// origin and no history (the engine writes the moved message's anew), all in the database: the body is never
/// read back. A message already gone moves nothing.
const MOVE_MESSAGE: &str = "WITH s AS (DELETE FROM veil_state WHERE queue = $1 AND seq = $2), \
     gone AS (DELETE FROM veil_body WHERE queue = $1 AND seq = $2 \
     RETURNING message_id, sent_at, attrs, body_md5, body), \
     moved AS (INSERT INTO veil_state (queue, seq, state, redrive, fifo_group) \
     SELECT $3::bigint, $4::bigint, $5::bytea, $6::bytea, $7::text FROM gone \
     ON CONFLICT (queue, seq) DO UPDATE SET state = EXCLUDED.state, redrive = EXCLUDED.redrive, \
     fifo_group = EXCLUDED.fifo_group) \
     INSERT INTO veil_body (queue, seq, message_id, sent_at, moved_from, attrs, body_md5, body) \
     SELECT $3::bigint, $4::bigint, message_id, sent_at, $8::bytea, attrs, body_md5, body FROM gone \
     ON CONFLICT (queue, seq) DO UPDATE SET message_id = EXCLUDED.message_id, sent_at = EXCLUDED.sent_at, \
     moved_from = EXCLUDED.moved_from, attrs = EXCLUDED.attrs, body_md5 = EXCLUDED.body_md5, body = EXCLUDED.body";
/// The columns a message's body row carries from place to place — `veil_body` to `veil_inbox`, an inbox to
/// another shard's, an inbox back to `veil_body` — named once; a macro, so that `concat!` builds each
/// statement at compile time.
macro_rules! carried_columns {
    () => {
        "message_id, sent_at, moved_from, attrs, body_md5, body"
    };
}

/// Takes a message out of its queue into another partition's inbox (migrations/V6__inbox.sql), its body with
/// it, without reading it back. A message already gone sends nothing.
const SEND_TO_INBOX: &str = concat!(
    "WITH s AS (DELETE FROM veil_state WHERE queue = $1 AND seq = $2), \
     gone AS (DELETE FROM veil_body WHERE queue = $1 AND seq = $2 RETURNING ",
    carried_columns!(),
    ") INSERT INTO veil_inbox (partition, entry, ",
    carried_columns!(),
    ") SELECT $3::integer, $4::bytea, ",
    carried_columns!(),
    " FROM gone"
);
/// Makes an inbox entry the message at its new place and deletes the entry, in one statement; an entry
/// already accepted (gone) writes nothing. A NULL origin keeps the one the message had.
const ACCEPT_INBOUND: &str = concat!(
    "WITH gone AS (DELETE FROM veil_inbox WHERE id = $1 RETURNING ",
    carried_columns!(),
    "), \
     arrived AS (INSERT INTO veil_state (queue, seq, state, redrive, fifo_group) \
     SELECT $2::bigint, $3::bigint, $4::bytea, $5::bytea, $6::text FROM gone \
     ON CONFLICT (queue, seq) DO UPDATE SET state = EXCLUDED.state, redrive = EXCLUDED.redrive, \
     fifo_group = EXCLUDED.fifo_group, history = NULL) \
     INSERT INTO veil_body (queue, seq, ",
    carried_columns!(),
    ") SELECT $2::bigint, $3::bigint, message_id, sent_at, coalesce($7::bytea, moved_from), attrs, body_md5, body \
     FROM gone ON CONFLICT (queue, seq) DO UPDATE SET message_id = EXCLUDED.message_id, \
     sent_at = EXCLUDED.sent_at, moved_from = EXCLUDED.moved_from, attrs = EXCLUDED.attrs, \
     body_md5 = EXCLUDED.body_md5, body = EXCLUDED.body"
);
/// Hands an inbox entry on to another partition, or drops it.
const FORWARD_INBOUND: &str = "UPDATE veil_inbox SET partition = $2, entry = $3 WHERE id = $1";
const DROP_INBOUND: &str = "DELETE FROM veil_inbox WHERE id = $1";
/// The oldest entries of a partition's inbox, without their bodies (the acceptance copies those).
pub const READ_INBOX: &str =
    "SELECT id, entry FROM veil_inbox WHERE partition = $1 ORDER BY id LIMIT $2";

/// Moves between shards (crate::import), on the origin: the oldest entries bound for `$1` (partitions), at
/// most `$2` of them and, past the first, `$3` bytes of bodies.
pub const IMPORT_WAITING: &str = concat!(
    "SELECT id, partition, entry, ",
    carried_columns!(),
    " FROM (SELECT *, sum(octet_length(body)) OVER (ORDER BY id) AS through \
       FROM (SELECT * FROM veil_inbox WHERE partition = ANY($1) ORDER BY id LIMIT $2) AS oldest) AS counted \
     WHERE through - octet_length(body) < $3 ORDER BY id"
);
/// On the home: copies the entries into partition `$2`'s inbox, each once per origin shard `$1` (marked in
/// `veil_inbox_imported`, so a copy repeated after a crash copies nothing).
pub const IMPORT_COPY: &str = concat!(
    "WITH marked AS (INSERT INTO veil_inbox_imported (origin_shard, origin_id) \
       SELECT $1, id FROM unnest($3::bigint[]) AS id ON CONFLICT DO NOTHING RETURNING origin_id) \
     INSERT INTO veil_inbox (partition, entry, ",
    carried_columns!(),
    ") SELECT $2, e.entry, e.message_id, e.sent_at, e.moved_from, e.attrs, e.body_md5, e.body \
       FROM unnest($3::bigint[], $4::bytea[], $5::bytea[], $6::bigint[], $7::bytea[], $8::bytea[], \
                   $9::bytea[], $10::bytea[]) AS e (id, entry, ",
    carried_columns!(),
    ") JOIN marked ON marked.origin_id = e.id ORDER BY e.id"
);
/// On the origin, once copied: the entries leave its inbox.
pub const IMPORT_DELETE_ORIGIN: &str =
    "DELETE FROM veil_inbox WHERE partition = $1 AND id = ANY($2)";
/// On the home, once the origin forgot them: the marks are no longer needed.
pub const IMPORT_FORGET_MARKS: &str =
    "DELETE FROM veil_inbox_imported WHERE origin_shard = $1 AND origin_id = ANY($2)";

/// The next queue id outside partitions, and a partition's own (migrations/V5__partitions.sql).
const PUT_NEXT_QUEUE_ID: &str =
    "INSERT INTO veil_store_meta (name, value) VALUES ('next_queue_id', $1) \
     ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value";
const PUT_PARTITION_NEXT_QUEUE_ID: &str =
    "UPDATE veil_partition SET next_queue_id = $1 WHERE partition = $2";
const PUT_MOVE_TASK: &str =
    "INSERT INTO veil_move_task (partition, number, record) VALUES ($1, $2, $3) \
     ON CONFLICT (partition, number) DO UPDATE SET record = EXCLUDED.record";
const DELETE_MOVE_TASK: &str = "DELETE FROM veil_move_task WHERE partition = $1 AND number = $2";
/// The fencing check (migrations/V3__narrow_state.sql, V5 for a partition's): fails the transaction unless
/// the lease's epoch is still this one, and holds the lease row against a new holder's epoch bump until the
/// transaction ends.
const FENCE: &str = "SELECT veil_fence($1)";
pub(crate) const FENCE_PARTITION: &str = "SELECT veil_fence_partition($1, $2)";
/// The SQLSTATE `veil_fence` fails with.
pub const FENCED_SQLSTATE: &str = "VL001";

pub const READ_PAYLOADS: &str =
    "SELECT seq, message_id, sent_at, moved_from, attrs, body_md5, body \
     FROM veil_body WHERE queue = $1 AND seq = ANY($2)";

/// The writer connection's prepared statements: one per operation written alone, one per kind of change of
/// a batch (`super::batch`).
#[derive(Clone)]
pub struct Prepared {
    put_queue: Statement,
    delete_queue: Statement,
    purge_queue: Statement,
    move_message: Statement,
    put_next_queue_id: Statement,
    put_move_task: Statement,
    delete_move_task: Statement,
    fence: Statement,
    send_to_inbox: Statement,
    accept_inbound: Statement,
    forward_inbound: Statement,
    drop_inbound: Statement,
    pub batch: BatchStatements,
    /// What the statements write and fence: the partition in catalog rows, the lease whose epoch they check.
    pub scope: Scope,
}

/// A batch's statements, in the order a batch is written.
#[derive(Clone)]
pub struct BatchStatements {
    pub delete_dedups: Statement,
    pub put_dedups: Statement,
    pub delete_messages: Statement,
    pub insert_messages: Statement,
    pub put_states: Statement,
    pub put_bodies: Statement,
    pub put_counters: Statement,
}

impl Prepared {
    /// Prepares every statement, pipelined (one round trip).
    pub async fn new(client: &Client, scope: Scope) -> Result<Self, StoreError> {
        use super::batch::sql as b;
        let partitioned = matches!(scope, Scope::Partition { .. });
        let all = futures_util::future::try_join_all(
            [
                PUT_QUEUE,
                DELETE_QUEUE,
                PURGE_QUEUE,
                MOVE_MESSAGE,
                if partitioned {
                    PUT_PARTITION_NEXT_QUEUE_ID
                } else {
                    PUT_NEXT_QUEUE_ID
                },
                PUT_MOVE_TASK,
                DELETE_MOVE_TASK,
                if partitioned { FENCE_PARTITION } else { FENCE },
                SEND_TO_INBOX,
                ACCEPT_INBOUND,
                FORWARD_INBOUND,
                DROP_INBOUND,
                b::DELETE_DEDUPS,
                b::PUT_DEDUPS,
                b::DELETE_MESSAGES,
                b::INSERT_MESSAGES,
                b::PUT_STATES,
                b::PUT_BODIES,
                b::PUT_COUNTERS,
            ]
            .map(|sql| client.prepare(sql)),
        )
        .await
        .map_err(db_error)?;
        let mut all = all.into_iter();
        let mut next = || {
            all.next()
                .ok_or_else(|| StoreError::Io("a statement went missing".into()))
        };
        Ok(Self {
            put_queue: next()?,
            delete_queue: next()?,
            purge_queue: next()?,
            move_message: next()?,
            put_next_queue_id: next()?,
            put_move_task: next()?,
            delete_move_task: next()?,
            fence: next()?,
            send_to_inbox: next()?,
            accept_inbound: next()?,
            forward_inbound: next()?,
            drop_inbound: next()?,
            batch: BatchStatements {
                delete_dedups: next()?,
                put_dedups: next()?,
                delete_messages: next()?,
                insert_messages: next()?,
                put_states: next()?,
                put_bodies: next()?,
                put_counters: next()?,
            },
            scope,
        })
    }

    /// The same statements, for another store of the same kind of scope (a node's shared writer writes for
    /// every partition it owns on one connection).
    pub fn for_scope(&self, scope: Scope) -> Self {
        Self {
            scope,
            ..self.clone()
        }
    }

    /// The fencing check that opens every write transaction under a lease.
    pub fn fence(&self) -> Option<(Statement, Params)> {
        let params = match self.scope {
            Scope::Whole => return None,
            Scope::Leader { epoch } => vec![p(epoch)],
            Scope::Partition {
                partition, epoch, ..
            } => vec![p(partition as i32), p(epoch)],
        };
        Some((self.fence.clone(), params))
    }

    /// The partition catalog rows are written with.
    fn partition(&self) -> i32 {
        self.scope.partition() as i32
    }
}

/// One statement's parameters, owned so that a whole group's statements can be in flight at once.
pub type Params = Vec<Box<dyn ToSql + Sync + Send>>;

pub fn p<T: ToSql + Sync + Send + 'static>(value: T) -> Box<dyn ToSql + Sync + Send> {
    Box::new(value)
}

pub fn encode_opt<T: Serialize>(value: &Option<T>) -> Result<Option<Vec<u8>>, StoreError> {
    value.as_ref().map(encode).transpose()
}

/// The part of `payload` kept as one postcard value (`veil_body.attrs`).
pub fn payload_rest(payload: &Payload) -> Result<Vec<u8>, StoreError> {
    encode(&PayloadRestRef {
        attributes: &payload.attributes,
        sender_id: &payload.sender_id,
        group: &payload.group,
        dedup_id: &payload.dedup_id,
    })
}

/// The statement that applies `op`, one of the operations a batch does not hold (`plan`), with its parameters.
pub fn statement(prepared: &Prepared, op: StoreOp) -> Result<(Statement, Params), StoreError> {
    Ok(match op {
        StoreOp::PutQueue(record) => {
            check_partition(prepared.scope, &record.key)?;
            (
                prepared.put_queue.clone(),
                vec![
                    p(big(record.id)),
                    p(record.key.namespace.clone()),
                    p(record.key.name.clone()),
                    p(encode(&record)?),
                    p(prepared.partition()),
                ],
            )
        }
        StoreOp::DeleteQueue(queue) => (prepared.delete_queue.clone(), vec![p(big(queue))]),
        StoreOp::PurgeQueue(queue) => (prepared.purge_queue.clone(), vec![p(big(queue))]),
        StoreOp::MoveMessage(move_op) => {
            let MoveMessage {
                from,
                to,
                state,
                moved_from,
                redrive,
                fifo_group,
            } = *move_op;
            (
                prepared.move_message.clone(),
                vec![
                    p(big(from.0)),
                    p(big(from.1)),
                    p(big(to.0)),
                    p(big(to.1)),
                    p(encode(&state)?),
                    p(encode_opt(&redrive)?),
                    p(fifo_group),
                    p(Some(encode(&moved_from)?)),
                ],
            )
        }
        StoreOp::PutNextQueueId(next) => {
            let mut params = vec![p(big(next))];
            if let Scope::Partition { partition, .. } = prepared.scope {
                params.push(p(partition as i32));
            }
            (prepared.put_next_queue_id.clone(), params)
        }
        StoreOp::PutMoveTask(record) => (
            prepared.put_move_task.clone(),
            vec![
                p(prepared.partition()),
                p(big(record.number)),
                p(encode(&record)?),
            ],
        ),
        StoreOp::DeleteMoveTask { number } => (
            prepared.delete_move_task.clone(),
            vec![p(prepared.partition()), p(big(number))],
        ),
        StoreOp::SendToInbox(sent) => (
            prepared.send_to_inbox.clone(),
            vec![
                p(big(sent.from.0)),
                p(big(sent.from.1)),
                p(sent.partition as i32),
                p(encode(&sent.entry)?),
            ],
        ),
        StoreOp::AcceptInbound(accepted) => {
            let AcceptInbound {
                id,
                to,
                state,
                moved_from,
                redrive,
                fifo_group,
            } = *accepted;
            (
                prepared.accept_inbound.clone(),
                vec![
                    p(big(id)),
                    p(big(to.0)),
                    p(big(to.1)),
                    p(encode(&state)?),
                    p(encode_opt(&redrive)?),
                    p(fifo_group),
                    p(encode_opt(&moved_from)?),
                ],
            )
        }
        StoreOp::ForwardInbound(forwarded) => match *forwarded {
            ForwardInbound {
                id,
                to: Some((partition, entry)),
            } => (
                prepared.forward_inbound.clone(),
                vec![p(big(id)), p(partition as i32), p(encode(&entry)?)],
            ),
            ForwardInbound { id, to: None } => (prepared.drop_inbound.clone(), vec![p(big(id))]),
        },
        batched => {
            return Err(StoreError::Io(format!(
                "internal: {} is written in a batch, not alone",
                op_name(&batched)
            )))
        }
    })
}

/// A partition's store holds only the queues that hash to it: an engine asked to create one elsewhere is a
/// routing defect, refused before it reaches the catalog.
fn check_partition(scope: Scope, key: &QueueKey) -> Result<(), StoreError> {
    if let Scope::Partition {
        partition, count, ..
    } = scope
    {
        let belongs = partition_of(key, count);
        if belongs != partition {
            return Err(StoreError::Io(format!(
                "internal: queue {}/{} belongs to partition {belongs}, not to this store's {partition}",
                key.namespace, key.name
            )));
        }
    }
    Ok(())
}

fn op_name(op: &StoreOp) -> &'static str {
    match op {
        StoreOp::PutCounters { .. } => "PutCounters",
        StoreOp::PutMessage { .. } => "PutMessage",
        StoreOp::PutState { .. } => "PutState",
        StoreOp::DeleteMessage { .. } => "DeleteMessage",
        StoreOp::ReplaceBody { .. } => "ReplaceBody",
        StoreOp::PutDedup { .. } => "PutDedup",
        StoreOp::DeleteDedup { .. } => "DeleteDedup",
        StoreOp::PutHistory { .. } => "PutHistory",
        _ => "an operation",
    }
}

fn id16(bytes: &[u8], what: &str) -> Result<[u8; 16], StoreError> {
    bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("{what} is not 16 bytes")))
}

/// Column `index` of `row`, or `StoreError::Corrupt` when it does not hold a `T` (never a panic).
pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
) -> Result<T, StoreError> {
    row.try_get(index)
        .map_err(|e| StoreError::Corrupt(format!("reading column {index}: {e}")))
}

/// A row of [`READ_INBOX`] as the entry it holds.
pub fn inbox_row(row: &Row) -> Result<Inbound, StoreError> {
    let id = unbig(get(row, 0)?);
    let entry: Vec<u8> = get(row, 1)?;
    Ok(Inbound {
        id,
        entry: decode(&entry, "an inbox entry")?,
    })
}

/// A row of [`READ_PAYLOADS`] as its sequence number and payload.
pub fn payload_row(row: &Row) -> Result<(Seq, Payload), StoreError> {
    let seq = unbig(get(row, 0)?);
    let moved_from: Option<&[u8]> = get(row, 3)?;
    let rest: PayloadRest = decode(get(row, 4)?, "a payload")?;
    let body: Vec<u8> = get(row, 6)?;
    Ok((
        seq,
        Payload {
            message_id: id16(get(row, 1)?, "a message id")?,
            body: Bytes::from(body),
            body_md5: id16(get(row, 5)?, "a body MD5")?,
            attributes: rest.attributes,
            sent_at: unbig(get(row, 2)?),
            sender_id: rest.sender_id,
            moved_from: moved_from
                .map(|bytes| decode::<MovedFrom>(bytes, "a move origin"))
                .transpose()?,
            group: rest.group,
            dedup_id: rest.dedup_id,
        },
    ))
}

/// Everything start-up reads (bodies excepted), each part taken by its `load_*` call.
#[derive(Default)]
pub struct Loaded {
    pub next_queue_id: QueueId,
    pub queues: Option<Vec<(QueueRecord, Counters)>>,
    pub messages: Option<Vec<(QueueId, Seq, MessageState)>>,
    pub redrives: Option<Vec<(QueueId, Seq, MessageRedrivePolicy)>>,
    pub groups: Option<Vec<(QueueId, Seq, String)>>,
    pub dedup: Option<Vec<(QueueId, String, DedupEntry)>>,
    pub move_tasks: Option<Vec<MoveTaskRecord>>,
    pub histories: Option<Vec<(QueueId, Seq, DeliveryHistory)>>,
}

/// Reads everything the engine loads at start-up in one repeatable-read transaction (one consistent view).
/// Set on every writer connection: each statement a writer sends finds its rows by primary key, so only
/// keyed lookups are planned. PostgreSQL caches a generic plan for a prepared statement from the table
/// statistics of the moment; made while the tables were near empty, it scanned `veil_state` whole and hashed
/// it for every state update and delete, which cost more as the backlog grew — measured with auto_explain,
/// docs/benchmarks.md "Writer plans".
pub const WRITER_PLANS: &str =
    "SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off";

/// How a scope narrows what a store reads: the rows of its partition's queues, or every row.
struct Filter {
    partition: Option<i32>,
}

impl Filter {
    fn of(scope: Scope) -> Self {
        Self {
            partition: match scope {
                Scope::Partition { partition, .. } => Some(partition as i32),
                Scope::Whole | Scope::Leader { .. } => None,
            },
        }
    }

    /// `sql` with `{queues}` replaced by a condition on its `queue` column (`AND`ed to `{and}` when there is
    /// one), and the parameters that condition takes.
    fn query(&self, sql: &str) -> (String, Vec<&(dyn ToSql + Sync)>) {
        match &self.partition {
            None => (sql.replace("{where}", "").replace("{and}", ""), Vec::new()),
            Some(partition) => {
                let condition = "queue IN (SELECT id FROM veil_queue WHERE partition = $1)";
                (
                    sql.replace("{where}", &format!("WHERE {condition}"))
                        .replace("{and}", &format!("AND {condition}")),
                    vec![partition as &(dyn ToSql + Sync)],
                )
            }
        }
    }

    /// `sql` with `{own}` replaced by a condition on the table's own `partition` column.
    fn own(&self, sql: &str) -> (String, Vec<&(dyn ToSql + Sync)>) {
        match &self.partition {
            None => (sql.replace("{own}", ""), Vec::new()),
            Some(partition) => (
                sql.replace("{own}", "WHERE partition = $1"),
                vec![partition as &(dyn ToSql + Sync)],
            ),
        }
    }
}

/// Stored messages and delivery histories of the scope's queues.
pub async fn counts(client: &Client, scope: Scope) -> Result<(u64, u64), StoreError> {
    let filter = Filter::of(scope);
    let (sql, params) = filter.query("SELECT count(*), count(history) FROM veil_state {where}");
    let row = client.query_one(&sql, &params).await.map_err(db_error)?;
    let messages: i64 = get(&row, 0)?;
    let histories: i64 = get(&row, 1)?;
    Ok((unbig(messages), unbig(histories)))
}

/// The next queue id the scope hands out.
async fn next_queue_id(
    txn: &tokio_postgres::Transaction<'_>,
    scope: Scope,
) -> Result<QueueId, StoreError> {
    let row = match scope {
        Scope::Partition { partition, .. } => txn
            .query_opt(
                "SELECT next_queue_id FROM veil_partition WHERE partition = $1",
                &[&(partition as i32)],
            )
            .await
            .map_err(db_error)?
            .ok_or_else(|| {
                StoreError::Corrupt(format!("partition {partition} is not in veil_partition"))
            })
            .map(Some)?,
        Scope::Whole | Scope::Leader { .. } => txn
            .query_opt(
                "SELECT value FROM veil_store_meta WHERE name = 'next_queue_id'",
                &[],
            )
            .await
            .map_err(db_error)?,
    };
    row.map(|row| get::<i64>(&row, 0).map(unbig))
        .transpose()
        .map(Option::unwrap_or_default)
}

pub async fn load(client: &mut Client, scope: Scope) -> Result<Loaded, StoreError> {
    let filter = Filter::of(scope);
    let txn = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db_error)?;
    // The client decodes each part before it asks for the next: not an idle session. Whole tables are read
    // here, so the writer session's keyed-lookup plans (`WRITER_PLANS`) do not apply.
    txn.batch_execute(&format!(
        "SET LOCAL statement_timeout = {}; SET LOCAL idle_in_transaction_session_timeout = 0; \
         SET LOCAL enable_seqscan = on; SET LOCAL enable_hashjoin = on; SET LOCAL enable_mergejoin = on",
        crate::limits::LOAD_TIMEOUT_MS
    ))
    .await
    .map_err(db_error)?;
    let next_queue_id = next_queue_id(&txn, scope).await?;
    let mut queues = Vec::new();
    let (sql, params) = filter.own(
        "SELECT record, sends, deliveries, redeliveries, deletes, expiries, dead_letter_moves, \
         dead_letter_drops, purges, moves_out FROM veil_queue {own} ORDER BY id",
    );
    for row in txn.query(&sql, &params).await.map_err(db_error)? {
        let record: QueueRecord = decode(get(&row, 0)?, "a queue")?;
        let n = |i| get::<i64>(&row, i).map(unbig);
        let counters = Counters {
            sends: n(1)?,
            deliveries: n(2)?,
            redeliveries: n(3)?,
            deletes: n(4)?,
            expiries: n(5)?,
            dead_letter_moves: n(6)?,
            dead_letter_drops: n(7)?,
            purges: n(8)?,
            moves_out: n(9)?,
        };
        queues.push((record, counters));
    }
    let (mut messages, mut redrives, mut groups) = (Vec::new(), Vec::new(), Vec::new());
    let (sql, params) = filter.query(
        "SELECT queue, seq, state, redrive, fifo_group FROM veil_state {where} ORDER BY queue, seq",
    );
    for row in txn.query(&sql, &params).await.map_err(db_error)? {
        let queue = unbig(get(&row, 0)?);
        let seq = unbig(get(&row, 1)?);
        messages.push((queue, seq, decode(get(&row, 2)?, "a message state")?));
        if let Some(bytes) = get::<Option<&[u8]>>(&row, 3)? {
            redrives.push((queue, seq, decode(bytes, "a message redrive policy")?));
        }
        if let Some(group) = get::<Option<String>>(&row, 4)? {
            groups.push((queue, seq, group));
        }
    }
    let mut dedup = Vec::new();
    let (sql, params) = filter.query(
        "SELECT queue, key, sent_at, message_id, seq FROM veil_dedup {where} ORDER BY queue, key",
    );
    for row in txn.query(&sql, &params).await.map_err(db_error)? {
        dedup.push((
            unbig(get(&row, 0)?),
            get(&row, 1)?,
            DedupEntry {
                sent_at: unbig(get(&row, 2)?),
                message_id: id16(get(&row, 3)?, "a deduplicated message id")?,
                seq: unbig(get(&row, 4)?),
            },
        ));
    }
    let mut move_tasks = Vec::new();
    let (sql, params) = filter.own("SELECT record FROM veil_move_task {own} ORDER BY number");
    for row in txn.query(&sql, &params).await.map_err(db_error)? {
        move_tasks.push(decode(get(&row, 0)?, "a move task")?);
    }
    let mut histories = Vec::new();
    let (sql, params) = filter.query(
        "SELECT queue, seq, history FROM veil_state WHERE history IS NOT NULL {and} ORDER BY queue, seq",
    );
    for row in txn.query(&sql, &params).await.map_err(db_error)? {
        histories.push((
            unbig(get(&row, 0)?),
            unbig(get(&row, 1)?),
            decode(get(&row, 2)?, "a delivery history")?,
        ));
    }
    txn.commit().await.map_err(db_error)?;
    Ok(Loaded {
        next_queue_id,
        queues: Some(queues),
        messages: Some(messages),
        redrives: Some(redrives),
        groups: Some(groups),
        dedup: Some(dedup),
        move_tasks: Some(move_tasks),
        histories: Some(histories),
    })
}
