"""The Celery app: ``celery -A workers worker -Q signals``."""

from workers.app import app

__all__ = ["app"]
