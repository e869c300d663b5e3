"""HTTP plumbing every face shares: keys and callers, body limits, JSON bodies, connection guards, text fields."""
