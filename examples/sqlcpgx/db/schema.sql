-- The service's own table. The outbox tables come from
-- sqlstore.Migrate (or `outbox migrate --print` for a migration tool).
CREATE TABLE IF NOT EXISTS orders (
    id     BIGSERIAL PRIMARY KEY,
    total  TEXT NOT NULL,
    status TEXT NOT NULL
);

-- What the consumer side applies: one payment row per paid order.
CREATE TABLE IF NOT EXISTS payments (
    order_id BIGINT PRIMARY KEY,
    amount   TEXT NOT NULL
);
