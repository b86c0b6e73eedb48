"""The activation lane: one base-agent activation per delegate at a time."""
