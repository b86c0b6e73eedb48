"""A user turn's reply while the model writes it: text deltas published to the delegate's Redis
pub/sub channel (:func:`inner_plane.redis_keys.conversation_deltas`), for the person's stream.

Ephemeral by design: nobody subscribed, nothing kept; a lost delta costs only the growing text,
because the reply itself is journaled when the activation completes and reaches the stream as a
durable message. Only activations answering a person's turn get one (the lane decides), so a
background activation's text never reaches the person. A reply that stops unfinished
(pre-empted, failed, the lease lost) ends with an ``aborted`` event saying what comes next.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import redis

from inner_plane import logs, redis_keys

DELTA, ABORTED = "delta", "aborted"
# What the person sees next, by how the reply stopped.
THEN = {
    "preempted": "resumed",  # the turn is queued again and answered from the start
    "failed": "failed",  # the turn failed; its state says why
    "lease_lost": "resumed",  # another worker took the lane over and answers the turn
}


class ReplyStream:
    def __init__(
        self, client: redis.Redis, delegate_id: str, activation_id: uuid.UUID, turn_id: uuid.UUID
    ) -> None:
        self.client = client
        self.channel = redis_keys.conversation_deltas(delegate_id)
        self.fields = {"turn_id": str(turn_id), "activation_id": str(activation_id)}
        self.sequence = 0
        self.broken = False

    def text(self, part: int, delta: str) -> None:
        """One piece of the reply: ``part`` counts the model calls of the activation (a new
        part replaces the text of the one before: a retried call or a later tool step)."""
        self._publish({"type": DELTA, "part": part, "text": delta})

    def aborted(self, why: str) -> None:
        self._publish({"type": ABORTED, "reason": why, "then": THEN.get(why, "failed")})

    def _publish(self, event: dict[str, Any]) -> None:
        if self.broken:
            return
        self.sequence += 1
        body = json.dumps({**event, **self.fields, "seq": self.sequence}, ensure_ascii=True)
        try:
            self.client.publish(self.channel, body)
        except redis.RedisError as error:  # ephemeral: the durable reply still comes
            self.broken = True
            logs.emit("reply_stream_unavailable", reason=str(error)[:200], **self.fields)
