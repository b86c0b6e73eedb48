"""Base-agent adapters and the port they implement.

Owns the protocols between the lane and whoever runs the agent (``port``: ``BaseAgent``,
``Composer``, ``StepGuard``) and the adapters (scripted, stand-in, dry run, the model agents).
The values crossing the port live in :mod:`inner_plane.activation`. May import the pure layer,
``journal``, the services and ``tools``; which adapter runs is chosen by :mod:`inner_plane.wiring`.
"""
