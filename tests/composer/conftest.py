"""Fixtures for the composer capability's tests."""
