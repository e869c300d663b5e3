"""How much optimizing cost: a bundle measured against the original (causal LMs, drafts, encoders, rerankers, KV types)."""
