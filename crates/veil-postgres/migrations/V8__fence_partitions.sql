-- The fencing check of a node's shared writer (crates/veil-postgres/src/store/shared.rs), whose transactions
-- write for several partitions: veil_fence_partition (V5) for all of them in one statement. Locks each
-- partition's row FOR KEY SHARE (a takeover's FOR UPDATE waits for it) and fails the transaction with SQLSTATE
-- VL001, naming the first partition whose epoch moved on.
CREATE FUNCTION veil_fence_partitions(owned integer[], expected bigint[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    moved record;
BEGIN
    SELECT o.partition, o.epoch AS expected, v.epoch AS held INTO moved
      FROM unnest(owned, expected) AS o (partition, epoch)
      LEFT JOIN LATERAL (SELECT epoch FROM veil_partition WHERE partition = o.partition FOR KEY SHARE) AS v
        ON true
     WHERE v.epoch IS DISTINCT FROM o.epoch
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'this node no longer owns partition % (its epoch %, the lease''s %)',
            moved.partition, moved.expected, coalesce(moved.held::text, 'missing')
            USING ERRCODE = 'VL001';
    END IF;
END
$$;
