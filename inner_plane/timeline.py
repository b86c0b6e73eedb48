"""The conversation timeline: durable conversation events presented in order, live or replayed.

:func:`entry` turns one stored event into a timeline entry; the live side
(:func:`follow_live`) and :func:`replay` both go through it, so replaying the stored events
rebuilds exactly the sequence shown live. Inner activity is never presented as a user message:
only ``user.message`` events carry the ``user`` role.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypedDict

from sqlalchemy import Engine

from inner_plane.journal.conversation import events
from inner_plane.journal.operator import live

LABELS = {
    events.USER_MESSAGE: "User",
    events.ASSISTANT_MESSAGE: "Assistant",
    events.TOOL_CALL: "Tool call",
    events.TOOL_RESULT: "Tool result",
    events.MEMORY_RETRIEVAL: "Inner Plane: memory retrieval",
    events.CONTEXT_ATTACHED: "Inner context attached to user turn",
    events.ACTIVATION_STARTED: "Internal activity started",
    events.ACTIVATION_COMPLETED: "Internal activity completed",
    events.ACTIVATION_FAILED: "Internal activity failed",
    events.ACTIVATION_INTERRUPTED: "Internal activity interrupted",
    events.TURN_RESUMED: "User turn resumed after pre-emption",
    events.CONTEXT_USAGE: "Inner Plane: context.usage",
    events.CONTEXT_COMPACTED: "Inner Plane: context.compacted",
    events.CONTEXT_CAPSULE: "Inner Plane: context.capsule",
    events.QUESTION_ASKED: "Question to the person",
    events.PERSON_NOTIFIED: "Message to the person (app)",
    events.CHANNEL_ANSWER: "Answer sent on the person's channel",
}
# A turn that came in by mail or text says so in its label.
CHANNEL_NAMES = {"email": "by email", "sms": "by SMS"}
ANSWER_LABEL = "User, answering question {id}"


def _role(event_type: str) -> str:
    if event_type == events.USER_MESSAGE:
        return "user"
    if event_type in (events.ASSISTANT_MESSAGE, events.QUESTION_ASKED, events.PERSON_NOTIFIED):
        return "assistant"
    if event_type in (events.TOOL_CALL, events.TOOL_RESULT):
        return "tool"
    return "inner"


def _signals_summary(payload: dict[str, Any]) -> str:
    signals = payload.get("signals") or []
    if not isinstance(signals, list):
        return ""
    kinds = sorted({str(s.get("kind")) for s in signals if isinstance(s, dict)})
    return f"{len(signals)} signal(s)" + (f": {', '.join(kinds)}" if kinds else "")


def message_text(event_type: str, payload: dict[str, Any]) -> str:
    """The words of a user or assistant message event: the user's text, or the assistant's
    reply (empty when the agent gave none: never the user's words)."""
    if event_type == events.ASSISTANT_MESSAGE:
        return str(payload.get("reply") or payload.get("content") or "")
    return str(payload.get("text") or payload.get("content") or "")


def summary(event_type: str, payload: dict[str, Any]) -> str:
    """One line describing the event (the expandable detail is the payload)."""
    if event_type == events.USER_MESSAGE:
        return message_text(event_type, payload)
    if event_type == events.ASSISTANT_MESSAGE:
        said = message_text(event_type, payload)
        # Only what the assistant said: what became of the inner context a user turn claimed
        # is the detail's (and the activation page's), never part of the assistant's words.
        if not said:
            said = "(no reply: dry run, no model configured)" if _dry(payload) else "(no reply)"
        return said
    if event_type == events.TOOL_CALL:
        arguments = payload.get("arguments")
        return _tool_name(payload) + ("" if arguments is None else f" {arguments}")
    if event_type == events.TOOL_RESULT:
        outcome = payload.get("error") or payload.get("output")
        return _tool_name(payload) + ("" if outcome is None else f" -> {outcome}")
    if event_type == events.MEMORY_RETRIEVAL:
        memories = payload.get("memories") or []
        if payload.get("status") == "recalled":
            shown = "; ".join(str(m.get("content"))[:80] for m in memories[:3])
            return f"recalled {len(memories)}: {shown}"
        return str(payload.get("status") or "")
    if event_type in (events.ACTIVATION_STARTED, events.CONTEXT_ATTACHED, events.TURN_RESUMED):
        trigger = payload.get("trigger")
        return " ".join(p for p in (str(trigger or ""), _signals_summary(payload)) if p)
    if event_type == events.ACTIVATION_COMPLETED:
        # The reply, if any, has its own assistant entry just before; this says what became of
        # the signals.
        return "; ".join(p for p in (outcome_words(payload), _duration(payload)) if p)
    if event_type == events.ACTIVATION_FAILED:
        parts = (str(payload.get("error") or ""), outcome_words(payload), _duration(payload))
        return "; ".join(p for p in parts if p)
    if event_type == events.ACTIVATION_INTERRUPTED:
        reason = f"pre-empted: {payload.get('reason')}" if payload.get("reason") else ""
        return "; ".join(p for p in (reason, _duration(payload)) if p)
    if event_type == events.CONTEXT_USAGE:
        return (
            f"input {payload.get('input_tokens')} output {payload.get('output_tokens')} "
            f"total {payload.get('total_tokens')} tokens"
        )
    if event_type == events.CONTEXT_CAPSULE:
        return str(payload.get("status") or "")
    if event_type == events.QUESTION_ASKED:
        return f"about {payload.get('about')}: {payload.get('text')}"
    if event_type == events.PERSON_NOTIFIED:
        return f"{payload.get('subject')}: {payload.get('body')}"
    if event_type == events.CHANNEL_ANSWER:
        where = CHANNEL_NAMES.get(str(payload.get("channel")), str(payload.get("channel")))
        said = f"{where} to {payload.get('to')}: {payload.get('state')}"
        if payload.get("segments"):
            said += f" ({payload.get('segments')} message(s))"
        if payload.get("error"):
            said += f" ({payload.get('error')})"
        return said
    return ""


# How each outcome reads, in the order they are said.
_OUTCOME_WORDS = {
    "acted": "acted on {n}",
    "escalated": "escalated {n}",
    "needs_input": "asked for input on {n}",
    "dismissed": "dismissed {n}",
    "deferred": "deferred {n}",
    "returned": "returned {n} unread",
    "retrying": "{n} to retry after a backoff",
    "dead": "{n} dead",
}


def _dry(payload: dict[str, Any]) -> bool:
    return payload.get("agent") == "dry-run"


def outcome_words(payload: dict[str, Any]) -> str:
    """What became of an activation's signals, in words: "acted on 1, dismissed 2 (no model
    configured)". Empty for an event that recorded no outcome (written before outcomes were)."""
    outcome = payload.get("outcome")
    if not isinstance(outcome, dict) or not isinstance(outcome.get("counts"), dict):
        return ""
    counts: dict[str, Any] = outcome["counts"]
    reasons = outcome.get("reasons") if isinstance(outcome.get("reasons"), dict) else {}
    said = []
    for name in [*_OUTCOME_WORDS, *sorted(set(counts) - set(_OUTCOME_WORDS))]:
        n = counts.get(name)
        if not isinstance(n, int) or n <= 0:
            continue
        words = _OUTCOME_WORDS.get(name, name + " {n}").format(n=n)
        reason = reasons.get(name) if reasons else None
        if isinstance(reason, str) and reason:
            words += f" ({reason if len(reason) <= 80 else reason[:77] + '...'})"
        said.append(words)
    if not said:
        return "no signals to settle"
    return ", ".join(said)


def _label(event_type: str, payload: dict[str, Any]) -> str:
    """The entry's label; a user's answer names the question it answers (the pair)."""
    if event_type == events.USER_MESSAGE:
        label = (
            ANSWER_LABEL.format(id=str(payload["in_reply_to"])[:36])
            if payload.get("in_reply_to")
            else LABELS[event_type]
        )
        how = CHANNEL_NAMES.get(str(payload.get("channel")))
        return label if how is None else f"{label} ({how})"
    return LABELS.get(event_type, f"Inner Plane: {event_type}")


def _tool_name(payload: dict[str, Any]) -> str:
    if payload.get("name"):
        return str(payload["name"])
    step = payload.get("step")
    return "(unnamed tool)" if step is None else f"(unnamed tool, step {step})"


def _duration(payload: dict[str, Any]) -> str:
    duration = payload.get("duration_ms")
    return f"in {duration:.0f} ms" if isinstance(duration, int | float) else ""


class TimelineEntry(TypedDict):
    """One entry of the timeline (JSON-ready): what the API, the UI and the CLI show."""

    seq: int | None
    at: str | None
    type: str
    label: str
    role: str
    summary: str
    activation_id: str | None
    turn_id: str | None
    conversation_id: str | None
    live_only: bool
    detail: dict[str, Any]


def entry(record: events.TimelineRecord) -> TimelineEntry:
    """A timeline entry from one event record (stored, or live-only)."""
    event_type = record["type"]
    payload = record["payload"]
    detail = payload
    if event_type == events.USER_MESSAGE:
        # The person's words only: the signals claimed with the turn are shown by the
        # "inner context attached" entry, never inside a user-role entry.
        detail = {k: v for k, v in payload.items() if k not in ("signals", "envelope")}
    return TimelineEntry(
        seq=record["seq"],
        at=record["created_at"],
        type=event_type,
        label=_label(event_type, payload),
        role=_role(event_type),
        summary=summary(event_type, payload),
        activation_id=record["activation_id"],
        turn_id=record["turn_id"],
        conversation_id=record["conversation_id"],
        live_only=bool(record.get("live_only")),
        detail=detail,
    )


def live_entry(data: object) -> TimelineEntry | None:
    """The timeline entry of a live-only record read back from the live feed (JSON another
    process wrote); None for data of any other shape."""
    if not isinstance(data, dict):
        return None
    event_type, payload = data.get("type"), data.get("payload")
    if not isinstance(event_type, str) or not isinstance(payload, dict):
        return None
    delegate_id, activation_id = data.get("delegate_id"), data.get("activation_id")
    record = events.LiveOnlyRecord(
        seq=None,
        type=event_type,
        payload=payload,
        delegate_id=delegate_id if isinstance(delegate_id, str) else "",
        activation_id=activation_id if isinstance(activation_id, str) else None,
        turn_id=None,
        conversation_id=None,
        created_at=None,
        live_only=True,
    )
    return entry(record)


def replay(
    engine: Engine, delegate_id: str, conversation_id: uuid.UUID | None = None
) -> list[TimelineEntry]:
    """Rebuild the timeline from the stored conversation events alone."""
    return [entry(r) for r in events.read_events(engine, delegate_id, conversation_id)]


def follow_live(callback: Callable[[TimelineEntry], None]) -> Callable[[], None]:
    """Call ``callback`` with each timeline entry as its event commits (or, for live-only
    notifications, as it happens). Returns a function that stops following."""

    def listener(record: events.TimelineRecord) -> None:
        callback(entry(record))

    events.add_listener(listener)
    return lambda: events.remove_listener(listener)


CapsuleStatus = Literal["started", "completed", "failed"]


def report_capsule(
    engine: Engine,
    delegate_id: str,
    status: CapsuleStatus,
    *,
    summary_text: str | None = None,
    error: str | None = None,
    activation_id: uuid.UUID | None = None,
) -> None:
    """The delegate reports a continuity-capsule refresh. ``completed`` is a durable
    conversation event; ``started`` and ``failed`` are live-only notifications."""
    if status not in ("started", "completed", "failed"):
        raise ValueError(f"capsule status must be started, completed or failed, not {status!r}")
    payload: dict[str, Any] = {"status": status}
    if summary_text is not None:
        payload["summary"] = summary_text
    if error is not None:
        payload["error"] = error
    if status == "completed":
        with engine.begin() as connection:
            events.append_event(
                connection,
                delegate_id=delegate_id,
                type=events.CONTEXT_CAPSULE,
                payload=payload,
                activation_id=activation_id,
            )
        return
    record = events.live_only_record(delegate_id, events.CONTEXT_CAPSULE, payload, activation_id)
    events.notify_live(record)
    # Through the live feed, to every process that follows it (the API's SSE, the CLI).
    live.raise_live_now(engine, delegate_id, record)


def render_line(item: Mapping[str, Any]) -> str:
    at = str(item.get("at") or "live")[:19].replace("T", " ")
    text = " ".join(str(item["summary"]).split())
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{at}  {item['label']}" + (f": {text}" if text else "")
