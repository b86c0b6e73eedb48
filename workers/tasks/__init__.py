"""Thin Celery tasks over ``inner_plane`` library functions, one module per flow stage."""

from workers.tasks import activation, signals, sources, timers

__all__ = ["activation", "signals", "sources", "timers"]
