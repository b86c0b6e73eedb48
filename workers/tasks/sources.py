"""Celery tasks: sources."""
