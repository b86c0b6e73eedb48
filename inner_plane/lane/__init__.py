"""The activation lane: one base-agent activation per delegate at a time.

Owns the lane run (``runner``: lock, lease, drain, release), its pure decisions (``decide``:
wait, idle, defer for budget or run, pre-emption, when to look again), opening an activation
(``opening``: the decision carried out, the batch claimed), running one (``activate``: compose,
agent, contact), how it ends (``finish``) and what it records (``records``), the step guard
and heartbeat (``guard``), user turns (``user_turns``) and the sweeper (``sweeper``).

May import the pure layer (``config``, ``logs``, ``redis_keys``, ``signals``, ``activation``),
``journal``, the services (``attention``, ``publish``) and the agent port; never the wiring or
the faces. The lane is built by :mod:`inner_plane.wiring`.
"""
