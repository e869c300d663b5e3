"""The offline demo model: a small Llama trained on text every Python install carries."""
