-- Set-based writes (docs/decisions/0011-partitioned-ownership.md): a message's state and delivery history
-- apart from its body, and the fencing check as one statement that fails by itself.

-- What start-up reads and every receive rewrites: a narrow row, so that a receive's update copies ~100 bytes,
-- not the body, and a reload scans states without touching bodies. The delivery history (postcard
-- DeliveryHistory, NULL until the first delivery) lives in the same row: a receive writes its state and its
-- history with one row update, and a delete removes both.
CREATE TABLE veil_state (
    queue       bigint NOT NULL,
    seq         bigint NOT NULL,
    state       bytea  NOT NULL,
    redrive     bytea,
    fifo_group  text,
    history     bytea,
    PRIMARY KEY (queue, seq)
-- Room in each page for the frequent state updates to stay on their page (HOT updates).
) WITH (fillfactor = 70);
INSERT INTO veil_state (queue, seq, state, redrive, fifo_group, history)
    SELECT m.queue, m.seq, m.state, m.redrive, m.fifo_group, h.history
      FROM veil_message m LEFT JOIN veil_history h ON h.queue = m.queue AND h.seq = m.seq;
DROP TABLE veil_history;

-- The rest of a message, written once at send (a body may be replaced by Azure's update).
ALTER TABLE veil_message RENAME TO veil_body;
ALTER TABLE veil_body DROP COLUMN state, DROP COLUMN redrive, DROP COLUMN fifo_group;
ALTER TABLE veil_body SET (fillfactor = 100);

-- The fencing check of every write transaction: reads the lease's epoch FOR SHARE (a new holder's epoch
-- bump waits for this transaction) and fails the transaction when it is not `expected`. Sent in the same
-- pipeline as the writes it fences, so it costs no round trip of its own.
CREATE FUNCTION veil_fence(expected bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    held bigint;
BEGIN
    SELECT epoch INTO held FROM veil_lease WHERE id = 1 FOR SHARE;
    IF held IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'this node no longer holds the leader lease (its epoch %, the lease''s %)',
            expected, coalesce(held::text, 'missing')
            USING ERRCODE = 'VL001';
    END IF;
END
$$;
