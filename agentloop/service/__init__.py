"""agentloop as an HTTP service: runs submitted, stored, queued, streamed and explained over HTTP."""
