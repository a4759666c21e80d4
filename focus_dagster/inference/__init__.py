"""Inference on loaded models: a batched runner over images (decoding in worker processes, device choice,
shards that survive a kill), zero-shot scores of dual encoders, yes/no token probabilities of MLLMs."""
