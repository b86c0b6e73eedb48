"""Celery tasks: activation."""
