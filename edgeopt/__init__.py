"""edgeopt: optimize a Hugging Face language model for a small device, then serve and monitor it."""

__version__ = "0.1.0"
