-- Moves between partitions (docs/decisions/0011-partitioned-ownership.md, step 7; veil_core::inbox): a
-- message whose target queue belongs to another partition leaves its queue into this table in the source
-- partition's transaction, and arrives in its target in the target partition's transaction, which deletes
-- the row. Each step commits whole, so a crash between them neither loses the message (the row stays until
-- accepted) nor duplicates it (accepting deletes the row it came from). The columns after `entry` are the
-- message's veil_body row as it left.
CREATE TABLE veil_inbox (
    id          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The partition whose owner accepts it (the target queue's).
    partition   integer NOT NULL,
    -- postcard veil_core::inbox::Outbound: the target, how it arrives, its state, rule, group and history.
    entry       bytea   NOT NULL,
    message_id  bytea   NOT NULL,
    sent_at     bigint  NOT NULL,
    moved_from  bytea,
    attrs       bytea   NOT NULL,
    body_md5    bytea   NOT NULL,
    body        bytea   NOT NULL
);
CREATE INDEX veil_inbox_by_partition ON veil_inbox (partition, id);
