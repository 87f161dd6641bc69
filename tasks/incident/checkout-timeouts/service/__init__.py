"""checkout-api: the slice of the service this incident touches."""
