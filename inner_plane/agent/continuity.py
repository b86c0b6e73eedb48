"""The conversation's context window kept within bounds across activations.

Between activations, under the delegate's lease, :class:`WindowKeeper` reads the window (the
items of its last compaction and the messages since) and, once it passes
``INNER_PLANE_CONTEXT_COMPACT_TOKENS``, compacts everything but the newest messages
(:func:`kept_messages`: ``CONTEXT_KEEP_MESSAGES``, and more while they fit in
``CONTEXT_KEEP_TOKENS``):

- on the Responses API with the official ``POST /responses/compact``
  (:class:`ResponsesCompactor`): its output (the kept user messages and one ``compaction`` item
  with its ``encrypted_content``) becomes the window's items, replayed exactly as returned.
  With ``store=false`` the replaced history is never sent again: only that output is.
- on Chat Completions (local servers have no compaction endpoint) by asking the same model for
  a summary (:class:`SummaryCompactor`), stored as one clearly labelled system-side item.

Why the standalone endpoint rather than ``context_management`` on the next call: compaction
then runs as a step of its own between activations, so a failure (429, 5xx, timeout, refusal)
costs no turn its answer and leaves the old window in place; it is pre-empted by a user turn
like any model call; and the result is known before any turn depends on it, stored once, and
replayed by every later activation (an in-call compaction item arrives inside one turn's
output, mixed with its reply and tool calls).

The new window, a durable ``context.compacted`` event (tokens before and after, items
replaced) and the call's ``context.usage`` are written in one fenced transaction: a holder
that lost its lease, or died half way, leaves the old window whole. A failure is recorded on
the window (shown to operators) and tried again after a backoff.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from inner_plane import logs
from inner_plane.activation import Preempted
from inner_plane.activation.tokens import Counter, cost_usd, counter_for, usage_counts
from inner_plane.agent.model_calls import (
    ModelCallFailed,
    RetryPolicy,
    call_timeout,
    stream_events,
)
from inner_plane.agent.port import LaneTransaction, StepGuard
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import usage as usage_journal
from inner_plane.journal.conversation import window as window_journal
from inner_plane.journal.database import single_statement
from inner_plane.journal.lane.leases import LeaseLost, fence
from inner_plane.runtime import Runtime

if TYPE_CHECKING:
    import openai

SUMMARY_LABEL = (
    "CONVERSATION SUMMARY (inner context: written by the delegate's own model from the earlier "
    "part of this conversation, which it replaces; a summary, not the person's words and not "
    "instructions)"
)
SUMMARY_INSTRUCTIONS = (
    "You maintain the long-term memory of a personal assistant's conversation with one person. "
    "Write a summary of the conversation so far that the assistant can rely on instead of the "
    "messages themselves. Keep every fact the person stated about themselves and the people, "
    "dates, names, preferences and commitments they mentioned, in their own words where "
    "possible; keep what the assistant promised and what is still open. Earlier summaries are "
    "part of the conversation: carry their facts forward. Write plain text, no preamble."
)


# A window this many times over its threshold is compacted even while user turns wait: a
# conversation whose next turn always arrives before the compaction ends would otherwise
# pre-empt it every time until the window no longer fits the model. 1.25 keeps such a
# conversation's mean input within 1.2 times that of one whose compactions never yield (the
# window saws between its compacted size and 1.25, not 1, times the threshold).
OVERDUE = 1.25


class _Unyielding:
    """A step guard that still stops for a lost lease but no longer yields to a user turn."""

    def __init__(self, guard: StepGuard) -> None:
        self.guard = guard

    def safe_point(self) -> None:
        with contextlib.suppress(Preempted):
            self.guard.safe_point()

    def checkpoint(self) -> None:
        with contextlib.suppress(Preempted):
            self.guard.checkpoint()

    def effect_key(self, step: int) -> str:
        return self.guard.effect_key(step)

    def reply_text(self, part: int, text: str) -> None:
        self.guard.reply_text(part, text)


class CompactionRefused(ModelCallFailed):
    """The API answered, but not with a usable compaction."""


@dataclass(frozen=True)
class Compaction:
    """What a compactor returned: the window's new items (exactly as the API gave them) and
    the call's usage."""

    items: list[dict[str, Any]]
    method: window_journal.Method
    usage: dict[str, Any]


class Compactor(Protocol):
    model: str

    def compact(self, items: list[dict[str, Any]], guard: StepGuard) -> Compaction: ...


def one_call(guard: StepGuard, call: Any) -> Any:
    """A non-streaming call on a reader thread, abandoned at the guard's checkpoint (a user
    turn waiting): the thread finishes on its own, its answer dropped."""
    for answer in stream_events(lambda: [call()], guard):
        return answer
    raise ModelCallFailed("the call ended without an answer")


def usage_of(reported: dict[str, Any] | None) -> dict[str, int]:
    reported = reported or {}
    return {
        "input_tokens": int(reported.get("input_tokens") or reported.get("prompt_tokens") or 0),
        "output_tokens": int(
            reported.get("output_tokens") or reported.get("completion_tokens") or 0
        ),
        "total_tokens": int(reported.get("total_tokens") or 0),
        "cached_tokens": int(
            (
                reported.get("input_tokens_details") or reported.get("prompt_tokens_details") or {}
            ).get("cached_tokens")
            or 0
        ),
        "reasoning_tokens": int(
            (
                reported.get("output_tokens_details")
                or reported.get("completion_tokens_details")
                or {}
            ).get("reasoning_tokens")
            or 0
        ),
    }


class ResponsesCompactor:
    """``POST /responses/compact`` (``client.responses.compact``)."""

    def __init__(
        self, client: openai.OpenAI, model: str, *, budget_s: float, call_timeout_s: float
    ) -> None:
        self.client = client
        self.model = model
        self.budget_s = budget_s
        self.call_timeout_s = call_timeout_s

    def compact(self, items: list[dict[str, Any]], guard: StepGuard) -> Compaction:
        policy = RetryPolicy(deadline=time.monotonic() + self.budget_s)

        def call() -> dict[str, Any]:
            raw = one_call(
                guard,
                lambda: self.client.responses.with_raw_response.compact(
                    model=self.model,
                    input=items,  # type: ignore[arg-type]
                    timeout=call_timeout(policy, self.call_timeout_s),
                ),
            )
            answer: dict[str, Any] = raw.http_response.json()
            return answer

        answer = policy.run(0, call, guard)
        output = answer.get("output")
        if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
            raise CompactionRefused("the compaction answer has no output list")
        compactions = [i for i in output if i.get("type") == "compaction"]
        if len(compactions) != 1 or not isinstance(compactions[0].get("encrypted_content"), str):
            raise CompactionRefused(
                f"the compaction answer holds {len(compactions)} compaction item(s), not one"
            )
        return Compaction(output, "compact", usage_of(answer.get("usage")))


class SummaryCompactor:
    """Chat Completions: the same model writes a summary of the replaced part."""

    def __init__(
        self, client: openai.OpenAI, model: str, *, budget_s: float, call_timeout_s: float
    ) -> None:
        self.client = client
        self.model = model
        self.budget_s = budget_s
        self.call_timeout_s = call_timeout_s

    def compact(self, items: list[dict[str, Any]], guard: StepGuard) -> Compaction:
        policy = RetryPolicy(deadline=time.monotonic() + self.budget_s)
        # The conversation keeps its roles: the person's words stay user messages, earlier
        # summaries stay system messages; the request to summarise is the system's.
        messages: list[dict[str, Any]] = [{"role": "system", "content": SUMMARY_INSTRUCTIONS}]
        for item in items:
            role = item.get("role")
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
            if role in ("user", "assistant") and isinstance(content, str):
                messages.append({"role": role, "content": content})
            elif isinstance(content, str):
                messages.append({"role": "system", "content": content})
        messages.append({"role": "system", "content": "Write the summary now."})

        def call() -> Any:
            return one_call(
                guard,
                lambda: self.client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    timeout=call_timeout(policy, self.call_timeout_s),
                ),
            )

        answer = policy.run(0, call, guard)
        choices = getattr(answer, "choices", None) or []
        text = (choices[0].message.content or "").strip() if choices else ""
        if not text:
            raise CompactionRefused("the model returned no summary")
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        item = {"role": "developer", "content": f"{SUMMARY_LABEL}, {stamp}:\n{text}"}
        reported = answer.usage.model_dump() if getattr(answer, "usage", None) else None
        return Compaction([item], "summary", usage_of(reported))


def kept_messages(message_tokens: list[int], keep_messages: int, keep_tokens: int) -> int:
    """How many of the newest messages (``message_tokens``, oldest first) a compaction keeps
    verbatim: ``keep_messages`` at least, then more while all kept fit in ``keep_tokens``, but
    never the oldest by that token rule (a compaction always has a message to replace)."""
    kept = min(keep_messages, len(message_tokens))
    total = sum(message_tokens[len(message_tokens) - kept :])
    while kept < len(message_tokens) - 1:
        tokens = message_tokens[len(message_tokens) - kept - 1]
        if total + tokens > keep_tokens:
            break
        kept += 1
        total += tokens
    return kept


def message_item(message: window_journal.WindowMessage) -> dict[str, Any]:
    role = "user" if message.type == conversation.USER_MESSAGE else "assistant"
    return {"role": role, "content": message.text}


@dataclass(frozen=True)
class WindowTokens:
    before: int
    items: int
    kept: int


class WindowKeeper:
    """Compacts a delegate's context window between activations (see the module's doc)."""

    def __init__(
        self,
        runtime: Runtime,
        compactor: Compactor,
        *,
        threshold: int,
        keep_messages: int,
        window_messages: int,
        retry_s: float,
        keep_tokens: int | None = None,
        counter: Counter | None = None,
    ) -> None:
        self.runtime = runtime
        self.compactor = compactor
        self.threshold = threshold
        self.keep_messages = keep_messages
        self.keep_tokens = threshold // 4 if keep_tokens is None else keep_tokens
        self.window_messages = window_messages
        self.retry_s = retry_s
        self.counter = counter or counter_for(compactor.model)

    @classmethod
    def from_runtime(cls, runtime: Runtime, compactor: Compactor) -> WindowKeeper | None:
        settings = runtime.settings
        if settings.context_compact_tokens is None:
            return None
        return cls(
            runtime,
            compactor,
            threshold=settings.context_compact_tokens,
            keep_messages=settings.context_keep_messages,
            keep_tokens=settings.context_keep_tokens,
            window_messages=settings.context_window_messages,
            retry_s=settings.context_compact_retry_s,
        )

    def message_tokens(self, window: window_journal.Window) -> list[int]:
        """Each message's tokens, oldest first (0 for one without text): the window's tokens
        are its items' and these, and what a compaction keeps is chosen from these."""
        return [self.counter.item(message_item(m)) if m.text else 0 for m in window.messages]

    def maintain(
        self, delegate_id: str, epoch: int, guard: StepGuard, transaction: LaneTransaction
    ) -> bool:
        with single_statement(self.runtime.engine) as connection:
            window = window_journal.read(connection, delegate_id, self.window_messages)
        sizes = self.message_tokens(window)
        before = window.item_tokens + sum(sizes)
        if before < self.threshold or not window.retry_due:
            return False
        keep = kept_messages(sizes, self.keep_messages, self.keep_tokens)
        replaced = window.messages[: len(window.messages) - keep]
        if not replaced:
            return False
        if before >= OVERDUE * self.threshold:
            guard = _Unyielding(guard)
        return self._compact(window, replaced, before, epoch, guard, transaction)

    def _compact(
        self,
        window: window_journal.Window,
        replaced: list[window_journal.WindowMessage],
        before: int,
        epoch: int,
        guard: StepGuard,
        transaction: LaneTransaction,
    ) -> bool:
        delegate_id = window.delegate_id
        sent = [*window.items, *(message_item(m) for m in replaced if m.text)]
        started = time.monotonic()
        logs.emit(
            "compaction_started",
            delegate=delegate_id,
            method=window.method,
            tokens=before,
            items=len(sent),
        )
        try:
            result = self.compactor.compact(sent, guard)
        except (Preempted, LeaseLost):
            logs.emit("compaction_yielded", delegate=delegate_id)
            raise
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"[:2000]
            with transaction() as connection:
                fence(connection, delegate_id, epoch)
                window_journal.note_failure(connection, window, reason, self.retry_s)
            logs.emit("compaction_failed", delegate=delegate_id, reason=reason[:300])
            return True
        after_items = self.counter.items(result.items)
        kept = window.messages[len(replaced) :]
        after = after_items + self.counter.items([message_item(m) for m in kept if m.text])
        elapsed_ms = round((time.monotonic() - started) * 1000, 1)
        model = self.compactor.model
        counts = usage_counts(result.usage)
        cost = cost_usd(model, result.usage, self.runtime.settings.token_prices)
        usage_payload: dict[str, Any] = {
            **result.usage,
            "model": model,
            "requests": 1,
            "purpose": "compaction",
        }
        if cost is not None:
            usage_payload["cost_usd"] = cost
        with transaction() as connection:
            fence(connection, delegate_id, epoch)
            version = window_journal.replace(
                connection,
                window,
                items=result.items,
                after_seq=replaced[-1].seq,
                method=result.method,
                item_tokens=after_items,
            )
            if version is None:
                raise LeaseLost(delegate_id, epoch, None)  # changed under us: write nothing
            compacted = {
                "method": result.method,
                "tokens_before": before,
                "tokens_after": after,
                "token_count": self.counter.method,
                "items_replaced": len(sent),
                "messages_replaced": len(replaced),
                "items": len(result.items),
                "through_seq": replaced[-1].seq,
                "version": version,
                "model": model,
                "duration_ms": elapsed_ms,
            }
            conversation.append_events(
                connection,
                delegate_id,
                [
                    conversation.NewEvent(conversation.CONTEXT_COMPACTED, compacted),
                    conversation.NewEvent(conversation.CONTEXT_USAGE, usage_payload),
                ],
            )
            usage_journal.add(connection, delegate_id, counts, 1, cost)
        logs.emit(
            "compacted",
            delegate=delegate_id,
            method=result.method,
            tokens_before=before,
            tokens_after=after,
            items_replaced=len(sent),
            version=version,
        )
        return True
