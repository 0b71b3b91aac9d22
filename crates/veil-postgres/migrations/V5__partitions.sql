-- Partitioned ownership (docs/decisions/0011-partitioned-ownership.md): queues belong to a fixed number of
-- partitions, each with its own lease, epoch and queue-id counter. How many partitions a cluster has is fixed
-- by the first node that needs it (crates/veil-postgres/src/partition.rs, `establish`), not here: this
-- migration only makes room. Until then every queue counts as partition 0.

-- The catalog: which partition a queue belongs to (the hash of its namespace and name, written by its
-- partition's store), and a queue name at most once. Deferred: a group that deletes a queue and creates one
-- of the same name writes the two in order, and only the end state must be unique.
ALTER TABLE veil_queue ADD COLUMN partition integer NOT NULL DEFAULT 0;
ALTER TABLE veil_queue ADD CONSTRAINT veil_queue_name_once UNIQUE (namespace, name) DEFERRABLE INITIALLY DEFERRED;
CREATE INDEX veil_queue_by_partition ON veil_queue (partition);

-- A move task belongs to its source queue's partition; each partition numbers its own.
ALTER TABLE veil_move_task ADD COLUMN partition integer NOT NULL DEFAULT 0;
ALTER TABLE veil_move_task DROP CONSTRAINT veil_move_task_pkey;
ALTER TABLE veil_move_task ADD PRIMARY KEY (partition, number);

-- One row per partition: its lease (who owns it, under which epoch, until when on the database's clock, and
-- where the owner takes calls) and the next queue id it hands out. Partition p's ids start at p << 40, so
-- partitions never hand out the same id (partition 0 continues the ids of the store before partitions).
CREATE TABLE veil_partition (
    partition      integer     PRIMARY KEY,
    node           text        NOT NULL DEFAULT '',
    epoch          bigint      NOT NULL DEFAULT 0,
    expires_at     timestamptz NOT NULL DEFAULT '-infinity',
    addrs          jsonb       NOT NULL DEFAULT '{}',
    next_queue_id  bigint      NOT NULL
);

-- The nodes alive now, each renewing its row while it runs: the fair share of partitions is ⌈P / live⌉.
CREATE TABLE veil_node (
    node        text        PRIMARY KEY,
    expires_at  timestamptz NOT NULL,
    addrs       jsonb       NOT NULL
);

-- The fencing check of a partition's writes, as veil_fence is the single leader's (V3, V4): locks the
-- partition's row FOR KEY SHARE (a takeover's FOR UPDATE waits for it) and fails the transaction with
-- SQLSTATE VL001 when the epoch moved on.
CREATE FUNCTION veil_fence_partition(owned integer, expected bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    held bigint;
BEGIN
    SELECT epoch INTO held FROM veil_partition WHERE partition = owned FOR KEY SHARE;
    IF held IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'this node no longer owns partition % (its epoch %, the lease''s %)',
            owned, expected, coalesce(held::text, 'missing')
            USING ERRCODE = 'VL001';
    END IF;
END
$$;
