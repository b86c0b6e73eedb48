"""Embedded servers and the process supervisor behind `inner-plane up`.

Owns the embedded stores, the process definitions, the ``up`` supervisor and the status
probes. May import ``journal``, ``celery_bridge`` and the pure layer."""
