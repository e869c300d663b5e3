"""What each architecture family adds to the GGUF conversion beyond the Llama layout every family shares (extras.py: the hook; one module per family)."""
