"""Stage 4, fetch: the bytes admitted episodes need, and nothing else. Parquet rows per episode (`tables`), the
MP4 sample table (`mp4index`), per-episode streams cut from packed files (`segments`), the byte-bounded store
with background fetches (`store`) pinned ahead of the plan (`prefetch`)."""
