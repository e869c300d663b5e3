"""What sentence-transformers does around an encoder's transformer (pooling, cross-encoder scoring), in numpy."""
