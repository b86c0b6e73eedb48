"""Signal model and kinds policy (pure: no I/O)."""
