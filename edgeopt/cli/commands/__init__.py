"""One module per CLI command; each keeps heavy imports inside the command function."""
