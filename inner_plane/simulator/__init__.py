"""The policy simulator: replays the journal's recorded signals under a candidate attention
policy, on a virtual clock, with the live lane's own decision functions
(:mod:`inner_plane.lane.decide`, :mod:`inner_plane.attention.policy`), and reports what would
change. Zero side effects: it reads through one READ ONLY transaction and imports nothing that
sends a task, touches Redis or calls a model (an import contract in ``pyproject.toml`` says so).
"""
