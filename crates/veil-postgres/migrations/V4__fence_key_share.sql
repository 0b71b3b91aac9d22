-- The fencing check locks the lease row FOR KEY SHARE instead of FOR SHARE (docs/decisions/0011-partitioned-ownership.md).
--
-- Several writer connections fence at once (crates/veil-postgres/src/store/lanes.rs), so some transaction
-- held the row FOR SHARE nearly all the time, and PostgreSQL lets a new share locker join the lockers ahead
-- of an UPDATE that waits for them: the leader's own renewal starved until its term ran out (measured: a
-- node with four writers left its term in every benchmark round). FOR KEY SHARE does not conflict with an
-- UPDATE that leaves the key alone, so renewals and releases no longer wait for writes. A takeover still
-- must: it locks the row FOR UPDATE first (crates/veil-postgres/src/lease.rs), which waits for every fence in
-- flight, and a fence after it reads the new epoch and fails.
CREATE OR REPLACE FUNCTION veil_fence(expected bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    held bigint;
BEGIN
    SELECT epoch INTO held FROM veil_lease WHERE id = 1 FOR KEY SHARE;
    IF held IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'this node no longer holds the leader lease (its epoch %, the lease''s %)',
            expected, coalesce(held::text, 'missing')
            USING ERRCODE = 'VL001';
    END IF;
END
$$;
