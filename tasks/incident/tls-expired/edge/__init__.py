"""api.internal's TLS edge: the HTTPS front of the internal API on this host."""
