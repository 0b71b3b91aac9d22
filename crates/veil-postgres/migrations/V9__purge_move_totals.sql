-- Two totals of a queue (crates/veil-core/src/model.rs `Counters`, docs/semantics.md §9 "Totals"): messages
-- removed by a purge, and messages moved to another queue by a move task or a re-queue (counted as deletes
-- before). Queues that existed before start both at 0.
ALTER TABLE veil_queue
    ADD COLUMN purges    bigint NOT NULL DEFAULT 0,
    ADD COLUMN moves_out bigint NOT NULL DEFAULT 0;
