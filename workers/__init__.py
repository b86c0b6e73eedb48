"""The Celery app: ``celery -A workers worker -Q signals`` (or ``python -m workers worker -Q
signals``, the same command line with Celery's own loading held like the app's).

A face: thin tasks over the library; may import any layer, the agent, composer and tools only
through ``inner_plane.wiring``. Importing it starts nothing (see ``workers.app``); it loads the
app with the collector held (``inner_plane.startup``), as every worker and beat does first."""

from inner_plane.startup import collector_held

with collector_held():
    from workers.app import app

__all__ = ["app"]
