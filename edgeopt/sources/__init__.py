"""What the user points edgeopt at: a checkpoint (local or hub id) and its config, a GGUF file, a bundle, a text file."""
