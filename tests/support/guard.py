"""A step guard for running agents outside the lane (the lane's own guard renews its lease)."""

from __future__ import annotations

import uuid


class RecordingGuard:
    def __init__(self, activation_id: uuid.UUID) -> None:
        self.activation_id = activation_id
        self.safe_points = 0
        self.reply_parts: list[tuple[int, str]] = []

    def safe_point(self) -> None:
        self.safe_points += 1

    def checkpoint(self) -> None:
        pass

    def effect_key(self, step: int) -> str:
        return f"{self.activation_id}:{step}"

    def reply_text(self, part: int, text: str) -> None:
        self.reply_parts.append((part, text))
