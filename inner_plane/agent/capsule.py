"""The continuity capsule: a short, versioned document of each delegate's standing state
(commitments, open questions, the person's current situation, what it is waiting on), written by
the delegate's own model and put into every activation's working context as its own notes.

A refresh is maintenance of the lane (:class:`~inner_plane.agent.port.ContextKeeper`): it runs
only when nothing else is due, under the delegate's lease, and yields to a user turn like any
model call; the next idle moment starts it again. It is due (:func:`refresh_due`, pure) after
a compaction, after ``CAPSULE_EVERY_MESSAGES`` new messages, and on a schedule
(``CAPSULE_REFRESH_S``) when anything was said since. Events: ``context.capsule`` started and
failed are live-only notices; completed is a durable conversation event with the version and
its text, written with the version in one fenced transaction.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from inner_plane import logs
from inner_plane.activation import Preempted
from inner_plane.activation.tokens import cost_usd, usage_counts
from inner_plane.agent.continuity import WindowKeeper, message_item, one_call, usage_of
from inner_plane.agent.model_calls import ModelCallFailed, RetryPolicy, call_timeout
from inner_plane.agent.port import LaneTransaction, StepGuard
from inner_plane.journal.conversation import capsule as capsule_journal
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import usage as usage_journal
from inner_plane.journal.conversation import window as window_journal
from inner_plane.journal.database import single_statement
from inner_plane.journal.lane.leases import LeaseLost, fence
from inner_plane.journal.operator import live
from inner_plane.runtime import Runtime

if TYPE_CHECKING:
    import openai

CAPSULE_INSTRUCTIONS = (
    "You keep the continuity capsule of a personal assistant: its own short notes on where "
    "things stand with the person it works for. Rewrite the capsule from the current one and "
    "the conversation below, under four headings: Commitments (what the assistant promised, "
    "with dates), Open questions, Current situation (the person's), Waiting on. Keep it under "
    "300 words; drop what is done; never invent. Answer with the capsule only."
)
MAX_TEXT = 8_000


def refresh_due(
    state: capsule_journal.RefreshState, every_messages: int | None, every_s: float | None
) -> str | None:
    """Why the capsule is due for a refresh ("compaction", "messages", "schedule"), or None."""
    latest = state["latest"]
    through = 0 if latest is None else latest["through_seq"]
    if state["newest_seq"] <= through:
        return None  # nothing said since the last version
    if latest is not None and state["window_after_seq"] > through:
        return "compaction"
    if every_messages is not None and state["messages_since"] >= every_messages:
        return "messages"
    if latest is not None and every_s is not None:
        age = (state["now"] - datetime.fromisoformat(latest["created_at"])).total_seconds()
        if age >= every_s:
            return "schedule"
    return None


class CapsuleWriter(Protocol):
    model: str

    def write(
        self, current: str, items: list[dict[str, Any]], guard: StepGuard
    ) -> tuple[str, dict[str, Any]]: ...


class ResponsesCapsuleWriter:
    def __init__(self, client: openai.OpenAI, model: str, *, budget_s: float, timeout_s: float):
        self.client, self.model, self.budget_s, self.timeout_s = client, model, budget_s, timeout_s

    def write(
        self, current: str, items: list[dict[str, Any]], guard: StepGuard
    ) -> tuple[str, dict[str, Any]]:
        policy = RetryPolicy(deadline=time.monotonic() + self.budget_s)
        request = [
            {"role": "developer", "content": f"CURRENT CAPSULE:\n{current or '(none yet)'}"},
            *items,
            {"role": "developer", "content": "Write the updated capsule now."},
        ]

        def call() -> dict[str, Any]:
            raw = one_call(
                guard,
                lambda: self.client.responses.with_raw_response.create(
                    model=self.model,
                    instructions=CAPSULE_INSTRUCTIONS,
                    input=request,  # type: ignore[arg-type]
                    store=False,
                    timeout=call_timeout(policy, self.timeout_s),
                ),
            )
            answer: dict[str, Any] = raw.http_response.json()
            return answer

        answer = policy.run(0, call, guard)
        text = "".join(
            str(part.get("text") or "")
            for item in answer.get("output") or []
            if isinstance(item, dict) and item.get("type") == "message"
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "output_text"
        ).strip()
        return text, usage_of(answer.get("usage"))


class ChatCapsuleWriter:
    def __init__(self, client: openai.OpenAI, model: str, *, budget_s: float, timeout_s: float):
        self.client, self.model, self.budget_s, self.timeout_s = client, model, budget_s, timeout_s

    def write(
        self, current: str, items: list[dict[str, Any]], guard: StepGuard
    ) -> tuple[str, dict[str, Any]]:
        policy = RetryPolicy(deadline=time.monotonic() + self.budget_s)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": CAPSULE_INSTRUCTIONS},
            {"role": "system", "content": f"CURRENT CAPSULE:\n{current or '(none yet)'}"},
        ]
        for item in items:
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                continue
            role = item.get("role") if item.get("role") in ("user", "assistant") else "system"
            messages.append({"role": role, "content": content})
        messages.append({"role": "system", "content": "Write the updated capsule now."})

        def call() -> Any:
            return one_call(
                guard,
                lambda: self.client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    timeout=call_timeout(policy, self.timeout_s),
                ),
            )

        answer = policy.run(0, call, guard)
        choices = getattr(answer, "choices", None) or []
        text = (choices[0].message.content or "").strip() if choices else ""
        reported = answer.usage.model_dump() if getattr(answer, "usage", None) else None
        return text, usage_of(reported)


def _notice(engine: Engine, delegate_id: str, payload: dict[str, Any]) -> None:
    """A live-only context.capsule notice: to this process's listeners and the live feed."""
    record = conversation.live_only_record(delegate_id, conversation.CONTEXT_CAPSULE, payload, None)
    conversation.notify_live(record)
    try:
        live.raise_live_now(engine, delegate_id, record)
    except SQLAlchemyError as error:  # a live-only notice is never worth failing the refresh
        logs.emit("live_notice_failed", delegate=delegate_id, reason=str(error)[:200])


class CapsuleKeeper:
    def __init__(
        self,
        runtime: Runtime,
        writer: CapsuleWriter,
        *,
        every_messages: int | None,
        every_s: float | None,
        window_messages: int,
    ) -> None:
        self.runtime = runtime
        self.writer = writer
        self.every_messages = every_messages
        self.every_s = every_s
        self.window_messages = window_messages

    def maintain(
        self, delegate_id: str, epoch: int, guard: StepGuard, transaction: LaneTransaction
    ) -> bool:
        engine = self.runtime.engine
        with single_statement(engine) as connection:
            state = capsule_journal.refresh_state(
                connection, delegate_id, (self.every_messages or 0) + 1
            )
        trigger = refresh_due(state, self.every_messages, self.every_s)
        if trigger is None:
            return False
        with single_statement(engine) as connection:
            window = window_journal.read(connection, delegate_id, self.window_messages)
        items = [*window.items, *(message_item(m) for m in window.messages if m.text)]
        current = "" if state["latest"] is None else state["latest"]["text"]
        _notice(engine, delegate_id, {"status": "started", "trigger": trigger})
        logs.emit("capsule_started", delegate=delegate_id, trigger=trigger)
        try:
            text, usage = self.writer.write(current, items, guard)
            if not text:
                raise ModelCallFailed("the model wrote an empty capsule")
        except (Preempted, LeaseLost) as stopped:
            reason = "pre-empted by a user turn" if isinstance(stopped, Preempted) else "lease lost"
            _notice(engine, delegate_id, {"status": "failed", "error": reason, "trigger": trigger})
            raise
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"[:500]
            _notice(engine, delegate_id, {"status": "failed", "error": reason, "trigger": trigger})
            logs.emit("capsule_failed", delegate=delegate_id, reason=reason)
            return True
        text = text[:MAX_TEXT]
        model = self.writer.model
        cost = cost_usd(model, usage, self.runtime.settings.token_prices)
        usage_payload: dict[str, Any] = {**usage, "model": model, "requests": 1}
        usage_payload["purpose"] = "capsule"
        if cost is not None:
            usage_payload["cost_usd"] = cost
        with transaction() as connection:
            fence(connection, delegate_id, epoch)
            version = capsule_journal.add_version(
                connection, delegate_id, text, trigger, state["newest_seq"]
            )
            conversation.append_events(
                connection,
                delegate_id,
                [
                    conversation.NewEvent(
                        conversation.CONTEXT_CAPSULE,
                        {
                            "status": "completed",
                            "version": version,
                            "trigger": trigger,
                            "summary": text,
                            "through_seq": state["newest_seq"],
                        },
                    ),
                    conversation.NewEvent(conversation.CONTEXT_USAGE, usage_payload),
                ],
            )
            usage_journal.add(connection, delegate_id, usage_counts(usage), 1, cost)
        logs.emit("capsule_completed", delegate=delegate_id, version=version, trigger=trigger)
        return True


class Maintenance:
    """Every context keeper of the lane in turn: the window's compaction first (a refresh
    after it sees the compacted window), then the capsule."""

    def __init__(self, *keepers: WindowKeeper | CapsuleKeeper) -> None:
        self.keepers = keepers

    def maintain(
        self, delegate_id: str, epoch: int, guard: StepGuard, transaction: LaneTransaction
    ) -> bool:
        ran = False
        for keeper in self.keepers:
            ran = keeper.maintain(delegate_id, epoch, guard, transaction) or ran
        return ran
