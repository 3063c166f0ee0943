-- name: CreateOrder :one
INSERT INTO orders (total, status) VALUES ($1, 'placed') RETURNING id;

-- name: PayOrder :one
UPDATE orders SET status = 'paid' WHERE id = $1 RETURNING total;

-- name: GetOrder :one
SELECT id, total, status FROM orders WHERE id = $1;
