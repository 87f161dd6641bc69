"""thumbs: the thumbnail worker (queue in, thumbnails out) and its on-call tooling."""
