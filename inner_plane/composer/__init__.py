"""The Context Composer: builds the working context for every activation, the same way whether
a user message or inner signals started it.

May import the agent's port, ``memory``, ``timeline``, ``journal``, ``runtime`` and the pure
layer; never ``tools`` or ``lane`` (``inner_plane.wiring`` builds it)."""

from __future__ import annotations

from inner_plane.agent.port import Composer
from inner_plane.runtime import Runtime


def build_composer(runtime: Runtime) -> Composer:
    """The composer a deployment runs, configured from the runtime's settings."""
    from inner_plane.composer.compose import ContextComposer

    return ContextComposer(runtime)


__all__ = ["build_composer"]
