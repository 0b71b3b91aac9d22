-- The cluster's shared state (docs/decisions/0007-scale-out.md): the leader lease and the shared secret.

-- One row: who leads, under which epoch, until when (the database's clock), and where it serves.
-- Every store write transaction reads `epoch` FOR SHARE and aborts when it is no longer its own (fencing);
-- taking the lease bumps `epoch`, waiting for those share locks, so a deposed leader cannot write after it.
CREATE TABLE veil_lease (
    id          smallint PRIMARY KEY CHECK (id = 1),
    node        text        NOT NULL,
    epoch       bigint      NOT NULL,
    expires_at  timestamptz NOT NULL,
    addrs       jsonb       NOT NULL
);
INSERT INTO veil_lease (id, node, epoch, expires_at, addrs)
    VALUES (1, '', 0, '-infinity', '{}');

-- Values every node shares: the secret that keys receipts, Azure delegation keys and the forwarding token.
CREATE TABLE veil_meta (
    key    text PRIMARY KEY,
    value  bytea NOT NULL
);
