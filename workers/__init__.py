"""The Celery app: ``celery -A workers worker -Q signals``.

A face: thin tasks over the library; may import any layer, the agent, composer and tools only
through ``inner_plane.wiring``. Importing it starts nothing (see ``workers.app``)."""

from workers.app import app

__all__ = ["app"]
