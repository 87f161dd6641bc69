-- the order history page: WHERE customer_id = ? ORDER BY created_at DESC
CREATE INDEX idx_orders_customer_created ON orders (customer_id, created_at);
