-- name: CreateOrder :one
INSERT INTO orders (total, status) VALUES ($1, 'placed') RETURNING id;

-- name: PayOrder :one
UPDATE orders SET status = 'paid' WHERE id = $1 RETURNING total;

-- name: GetOrder :one
SELECT id, total, status FROM orders WHERE id = $1;

-- name: RecordPayment :exec
INSERT INTO payments (order_id, amount) VALUES ($1, $2);

-- name: GetPayment :one
SELECT order_id, amount FROM payments WHERE order_id = $1;
