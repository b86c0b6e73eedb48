"""Embedded servers and the process supervisor behind `inner-plane up`."""
