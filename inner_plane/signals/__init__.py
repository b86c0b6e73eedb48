"""Signal model and kinds policy (pure: no I/O).

Owns the signal model and the kinds policy. May import only ``config``."""
