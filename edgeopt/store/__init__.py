"""Where results are kept: the bundle directory and its manifest, hidden work directories, the content-addressed cache."""
