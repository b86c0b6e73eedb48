"""Thin Celery tasks over ``inner_plane`` library functions, one module per flow stage."""

from workers.tasks import signals

__all__ = ["signals"]
