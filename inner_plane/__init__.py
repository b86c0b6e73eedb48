"""inner-plane: the Inner Context Plane.

``publish`` / ``publish_many`` journal inner signals in-process; ``user_turn`` queues a genuine
user turn through the activation lane.

The names below load on first use, so importing a submodule (the CLI, a probe) stays cheap.

The public API face. Nothing inside the library imports this package.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inner_plane.lane.user_turns import user_turn
    from inner_plane.publish import publish, publish_many
    from inner_plane.signals.model import Mode, PublishResult, SignalDraft, SignalError, Trust

_EXPORTS = {
    "Mode": "inner_plane.signals.model",
    "PublishResult": "inner_plane.signals.model",
    "SignalDraft": "inner_plane.signals.model",
    "SignalError": "inner_plane.signals.model",
    "Trust": "inner_plane.signals.model",
    "publish": "inner_plane.publish",
    "publish_many": "inner_plane.publish",
    "user_turn": "inner_plane.lane.user_turns",
}


class _Package(types.ModuleType):
    """``inner_plane.publish`` is the function, as it always was, even once the submodule of the
    same name is imported (the import system sets the package attribute to the module)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "publish" and isinstance(value, types.ModuleType):
            value = value.publish
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'inner_plane' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "Mode",
    "PublishResult",
    "SignalDraft",
    "SignalError",
    "Trust",
    "publish",
    "publish_many",
    "user_turn",
]
