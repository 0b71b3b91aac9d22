-- Moves between shards (docs/cluster.md "Shards"; crates/veil-postgres/src/import.rs): a message leaving for
-- a partition of another database lands in its own database's veil_inbox, as any move between partitions;
-- the target partition's owner copies it into the inbox of the target's database, then deletes it where it
-- was. The copy and the delete are two databases' commits, so the copy leaves a mark of the entry it came
-- from, in the copy's transaction: while the original still exists, a second copy (after a crash between the
-- two commits) finds the mark and adds nothing. The owner removes the marks once the originals are gone.
CREATE TABLE veil_inbox_imported (
    origin_shard  integer NOT NULL,
    origin_id     bigint  NOT NULL,
    PRIMARY KEY (origin_shard, origin_id)
);
