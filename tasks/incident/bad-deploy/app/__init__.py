"""orders-api: a tiny HTTP service that serves order totals."""
