"""A registry filled for an activation: the plane's own tools (settle, journal, timers,
remember, notify), then entry-point tools, then INNER_PLANE_TOOLS, then those a caller adds."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from importlib import metadata

from inner_plane.config import ConfigError
from inner_plane.runtime import Runtime
from inner_plane.tools.journal_tool import journal_tool
from inner_plane.tools.notify_tool import notify_tools
from inner_plane.tools.registry import ToolFactory, ToolRegistry
from inner_plane.tools.remember_tool import remember_tool
from inner_plane.tools.settle import settle_tool
from inner_plane.tools.timers_tool import timer_tools

ENTRY_POINT_GROUP = "inner_plane.tools"


def _load_reference(reference: str) -> ToolFactory:
    module_name, _, attribute = reference.strip().partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"INNER_PLANE_TOOLS: {reference!r} is not 'module:factory'")
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"INNER_PLANE_TOOLS: cannot load {reference!r}: {error}") from None
    if not callable(factory):
        raise ConfigError(f"INNER_PLANE_TOOLS: {reference!r} is not callable")
    return factory  # type: ignore[no-any-return]


def build_registry(runtime: Runtime, extra: Iterable[ToolFactory] = ()) -> ToolRegistry:
    """The plane's tools, then entry-point tools, then INNER_PLANE_TOOLS, then ``extra``."""
    registry = ToolRegistry(
        [settle_tool(), journal_tool(), *timer_tools(), remember_tool(), *notify_tools(runtime)]
    )
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        registry.add_from(runtime, entry.load())
    for reference in filter(None, (part.strip() for part in runtime.settings.tools.split(","))):
        registry.add_from(runtime, _load_reference(reference))
    for factory in extra:
        registry.add_from(runtime, factory)
    return registry
