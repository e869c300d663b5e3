"""Work batched off the event loop: encoder batches (embeddings, rerank) and prompt rendering on worker threads."""
