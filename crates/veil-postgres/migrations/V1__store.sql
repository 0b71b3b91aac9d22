-- The engine's durable state (PgStore, crates/veil-postgres/src/store/): what veil-store keeps in redb, as
-- tables a DBA can read. Ids and sequence numbers are veil-core's u64s stored as bigint (bit for bit).
-- `bytea` columns hold postcard, veil-core's serde types as veil-store encodes them.

-- A queue: its record (postcard QueueRecord), its name for reading, and its counters as columns (written with
-- almost every commit).
CREATE TABLE veil_queue (
    id                 bigint PRIMARY KEY,
    namespace          text   NOT NULL,
    name               text   NOT NULL,
    record             bytea  NOT NULL,
    sends              bigint NOT NULL DEFAULT 0,
    deliveries         bigint NOT NULL DEFAULT 0,
    redeliveries       bigint NOT NULL DEFAULT 0,
    deletes            bigint NOT NULL DEFAULT 0,
    expiries           bigint NOT NULL DEFAULT 0,
    dead_letter_moves  bigint NOT NULL DEFAULT 0,
    dead_letter_drops  bigint NOT NULL DEFAULT 0
);

-- Store-wide values: `next_queue_id`.
CREATE TABLE veil_store_meta (
    name   text PRIMARY KEY,
    value  bigint NOT NULL
);

-- A message. The payload is split so that SQL can replace a body (ReplaceBody) or re-home a message with a new
-- origin (MoveMessage) without reading it back: `body`/`body_md5` apart, `moved_from` apart (postcard
-- MovedFrom, NULL when it was sent here), and the rest (`attrs`: attributes, sender, group, deduplication id)
-- as postcard. `state` (postcard MessageState) is what start-up loads; `redrive` (postcard
-- MessageRedrivePolicy) is the message's own dead-letter rule; `fifo_group` is set only in FIFO queues.
CREATE TABLE veil_message (
    queue       bigint NOT NULL,
    seq         bigint NOT NULL,
    message_id  bytea  NOT NULL,
    sent_at     bigint NOT NULL,
    state       bytea  NOT NULL,
    redrive     bytea,
    fifo_group  text,
    moved_from  bytea,
    attrs       bytea  NOT NULL,
    body_md5    bytea  NOT NULL,
    body        bytea  NOT NULL,
    PRIMARY KEY (queue, seq)
-- Room in each page so that the frequent state updates (every receive) stay on their page (HOT updates).
) WITH (fillfactor = 80);

-- A delivered message's delivery history (postcard DeliveryHistory), gone with its message.
CREATE TABLE veil_history (
    queue    bigint NOT NULL,
    seq      bigint NOT NULL,
    history  bytea  NOT NULL,
    PRIMARY KEY (queue, seq),
    FOREIGN KEY (queue, seq) REFERENCES veil_message (queue, seq) ON DELETE CASCADE
);

-- A FIFO queue's remembered deduplication ids (the key is the id, prefixed by the group under group scope).
CREATE TABLE veil_dedup (
    queue       bigint NOT NULL,
    key         text   NOT NULL,
    sent_at     bigint NOT NULL,
    message_id  bytea  NOT NULL,
    seq         bigint NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Message move tasks (postcard MoveTaskRecord), by number.
CREATE TABLE veil_move_task (
    number  bigint PRIMARY KEY,
    record  bytea  NOT NULL
);
