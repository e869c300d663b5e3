"""Several models in one server: residency by bytes, and their caches on disk."""
