"""inner-plane: the Inner Context Plane.

``publish`` / ``publish_many`` journal inner signals in-process; ``user_turn`` queues a genuine
user turn through the activation lane.
"""

from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish, publish_many
from inner_plane.signals.model import Mode, PublishResult, SignalDraft, SignalError, Trust

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
