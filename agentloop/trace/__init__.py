"""Trace files: crash-safe JSONL writing, the span tracer, and the reader analysis builds on."""
