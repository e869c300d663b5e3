"""``edgeopt bench serve``: an HTTP load generator plus the raw-runtime and one-at-a-time baselines."""
