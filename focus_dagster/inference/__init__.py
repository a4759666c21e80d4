"""Batched inference: image decoding in worker processes, device choice, shards that survive a kill."""
