-- CHG-2291: record the sales channel of every order, NOT NULL with a default, and make status a
-- checked enum. SQLite cannot add a CHECK constraint to an existing table, so the table is
-- rebuilt: create the new shape, copy, drop the old one, rename.
CREATE TABLE orders_new (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    total_cents INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'paid' CHECK (status IN ('paid', 'refunded', 'cancelled')),
    channel TEXT NOT NULL DEFAULT 'web'
);
INSERT INTO orders_new (id, customer_id, created_at, total_cents, status)
    SELECT id, customer_id, created_at, total_cents, status FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
