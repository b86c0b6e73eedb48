"""Tools the base agent may call: the plane's own (settle a signal, describe background
activity from the journal) plus whatever a deployment registers through configuration
(``INNER_PLANE_TOOLS``) or the ``inner_plane.tools`` entry-point group.

Owns the tool registry and the plane's tools. May import ``timers``, ``journal``, ``runtime``
and the pure layer; never ``agent`` (the adapters call the tools, not the reverse)."""

from inner_plane.tools.build import build_registry
from inner_plane.tools.registry import Tool, ToolContext, ToolError, ToolRegistry

__all__ = ["Tool", "ToolContext", "ToolError", "ToolRegistry", "build_registry"]
