"""Thin Celery tasks over ``inner_plane`` library functions, one module per flow stage."""

from workers.tasks import activation, channels, signals, sources, timers

__all__ = ["activation", "channels", "signals", "sources", "timers"]
