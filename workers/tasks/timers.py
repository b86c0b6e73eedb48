"""Celery tasks: timers."""
