"""Planning: will a model fit a target, in which format and quantization, with how much KV (arithmetic, no torch)."""
