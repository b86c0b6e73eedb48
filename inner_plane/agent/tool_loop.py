"""The tool loop both model adapters run: model step, tool calls, model step... until the model
stops calling tools or the step limit is reached.

An adapter supplies one streamed model call (:meth:`ToolLoopAgent.model_step`) in its wire
format; the loop does the rest the same way for every wire format: safe points between steps
and between tool calls, retries inside the activation's time budget, compaction of a context
too long for the model (dropping the oldest history, each drop recorded), and a result, or on
failure or pre-emption a partial one, holding the tool actions, usage and retries so far.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import SpanKind

from inner_plane import tracing
from inner_plane.activation import AgentResult, Preempted, WorkingContext
from inner_plane.agent.model_calls import (
    AgentRunFailed,
    ContextTooLong,
    ModelCallFailed,
    RetryPolicy,
    call_tool,
    new_usage,
    settled_summary,
    tool_output,
)
from inner_plane.agent.port import StepGuard
from inner_plane.journal.lane.leases import LeaseLost
from inner_plane.runtime import Runtime
from inner_plane.tools import ToolContext, ToolRegistry

if TYPE_CHECKING:
    import openai

# Composer sections a too-long context may lose, in this order, after earlier tool steps:
# the oldest conversation message first, then all ambient, then all recalled memories.
# Instructions, standing memories, the time, the inner context and the user's turn stay.
DROPPABLE_SECTIONS = ("conversation", "ambient", "recall")


@dataclass
class Segment:
    """A unit of model input kept or dropped whole: one composer item, or one tool step (its
    output and the tool results answering it, so calls and results stay paired)."""

    items: list[dict[str, Any]]
    section: str  # a composer section, or "step"
    step: int | None = None


@dataclass
class ToolCall:
    call_id: str
    name: str
    arguments: str | None


@dataclass
class StepReply:
    """One completed model step, in the adapter's own wire format where it goes back."""

    history: list[dict[str, Any]]  # the items to replay on the next step
    calls: list[ToolCall]
    text: str
    usage: dict[str, int]  # input/output/total/cached/reasoning tokens of this call
    compactions: list[dict[str, Any]] = field(default_factory=list)  # the API's own


@dataclass
class RunState:
    context: WorkingContext
    guard: StepGuard
    policy: RetryPolicy
    segments: list[Segment]
    usage: dict[str, Any]
    agent: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    settlements: dict[Any, Any] = field(default_factory=dict)
    model_input: list[dict[str, Any]] | None = None
    reply: str = ""
    decision: str = ""
    # Adapter-specific state across steps (e.g. the Responses API's previous_response_id).
    chain: dict[str, Any] = field(default_factory=dict)
    # The model call now streaming, counted from 1 over the run (retries and steps alike).
    part: int = 0

    def text_delta(self, text: str) -> None:
        """The adapter's callback for reply text as it streams (see StepGuard.reply_text)."""
        if text:
            self.guard.reply_text(self.part, text)

    def result(self) -> AgentResult:
        usage = dict(self.usage)
        usage["retries"] = len(self.policy.attempts)
        if self.policy.attempts:
            usage["retry_log"] = list(self.policy.attempts)
        return AgentResult(
            settlements=dict(self.settlements),
            tool_actions=list(self.actions),
            reply=self.reply or None,
            usage=usage,
            decision=f"{self.decision}; settled: {settled_summary(self.settlements)}",
            model_input=self.model_input,
            compactions=list(self.compactions),
            agent=self.agent,
        )


def compact(segments: list[Segment], step: int, reason: str) -> dict[str, Any] | None:
    """Drop the oldest droppable history; the record of what went, or None if nothing can."""
    steps = [s for s in segments if s.section == "step"]
    victims: list[Segment] = []
    if len(steps) > 1:
        victims = [steps[0]]
    else:
        for section in DROPPABLE_SECTIONS:
            found = [s for s in segments if s.section == section]
            if found:
                victims = found[:1] if section == "conversation" else found
                break
    if not victims:
        return None
    for victim in victims:
        segments.remove(victim)
    return {
        "step": step,
        "kind": "dropped_oldest",
        "reason": reason[:300],
        "dropped": [{"section": v.section, "step": v.step, "items": len(v.items)} for v in victims],
    }


class ToolLoopAgent:
    name = "model"

    def __init__(
        self,
        runtime: Runtime,
        client: openai.OpenAI,
        model: str,
        tools: ToolRegistry,
        *,
        max_steps: int = 8,
        budget_s: float = 180.0,
        call_timeout_s: float = 120.0,
        retry_base_s: float = 0.5,
        retry_max_s: float = 20.0,
    ) -> None:
        self.runtime = runtime
        self.client = client
        self.model = model
        self.tools = tools
        self.max_steps = max_steps
        self.budget_s = budget_s
        self.call_timeout_s = call_timeout_s
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s

    # --- what an adapter supplies ---------------------------------------------------------

    def model_step(self, state: RunState, step: int) -> StepReply:
        """One streamed model call over ``state.segments`` (retries are the loop's)."""
        raise NotImplementedError

    def tool_result_item(self, call: ToolCall, output: str) -> dict[str, Any]:
        raise NotImplementedError

    def on_compacted(self, state: RunState) -> None:
        """The segments lost items: forget any server-side chain built on them."""

    # --- the loop -------------------------------------------------------------------------

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        state = RunState(
            context=context,
            guard=guard,
            policy=RetryPolicy(
                deadline=time.monotonic() + self.budget_s,
                base_s=self.retry_base_s,
                max_s=self.retry_max_s,
            ),
            segments=[Segment([item.wire_item()], item.section) for item in context.items],
            usage=new_usage(self.model),
            agent=self.name,
            model_input=[dict(item) for item in context.model_input()],
        )
        try:
            self._loop(state)
        except Preempted as preempted:
            state.decision = f"interrupted: {preempted.reason}"
            raise Preempted(preempted.reason, state.result()) from preempted
        except LeaseLost:
            raise  # another holder took over: nothing may be recorded
        except Exception as error:  # a model call or a tool failed: keep the work so far
            state.decision = f"failed: {error}"
            raise AgentRunFailed(f"{type(error).__name__}: {error}", state.result()) from error
        return state.result()

    def _call(self, state: RunState, step: int) -> StepReply:
        def attempt() -> StepReply:
            state.part += 1
            if not tracing.on:
                return self.model_step(state, step)
            return self._traced_step(state, step)

        while True:
            try:
                return state.policy.run(step, attempt, state.guard)
            except ContextTooLong as error:
                record = compact(state.segments, step, str(error))
                if record is None:
                    raise ModelCallFailed(
                        f"context too long for {self.model} even after dropping the oldest "
                        f"history ({len(state.compactions)} drop(s)): {error}"
                    ) from error
                state.compactions.append(record)
                self.on_compacted(state)

    def _traced_step(self, state: RunState, step: int) -> StepReply:
        """One model call in a ``chat`` span (GenAI conventions), with its usage."""
        with tracing.span(
            f"chat {self.model}",
            SpanKind.CLIENT,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": self.model,
                "gen_ai.conversation.id": state.context.activation.delegate_id,
                "inner_plane.step": step,
            },
        ) as current:
            reply = self.model_step(state, step)
            if current is not None:
                current.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": reply.usage.get("input_tokens", 0),
                        "gen_ai.usage.output_tokens": reply.usage.get("output_tokens", 0),
                        "gen_ai.response.finish_reasons": ["tool_calls" if reply.calls else "stop"],
                        "inner_plane.tool_calls": len(reply.calls),
                    }
                )
            return reply

    def _loop(self, state: RunState) -> None:
        guard = state.guard
        for step in range(self.max_steps):
            if step:
                guard.safe_point()
            reply = self._call(state, step)
            usage = state.usage
            usage["requests"] += 1
            for key, value in reply.usage.items():
                usage[key] = usage.get(key, 0) + value
            state.compactions.extend(reply.compactions)
            state.reply = reply.text or state.reply
            segment = Segment(list(reply.history), "step", step)
            state.segments.append(segment)
            if not reply.calls:
                state.decision = "finished" if step == 0 else f"finished after {step} tool step(s)"
                return
            tool_context = ToolContext(
                runtime=self.runtime,
                activation=state.context.activation,
                rendered_signal_ids=frozenset(state.context.rendered_signal_ids),
                guard=guard,
                step=step,
                settlements=state.settlements,
            )
            for index, call in enumerate(reply.calls):
                if index:
                    guard.checkpoint()  # a safe point between tool calls
                tool_context.call_index = index
                action = call_tool(
                    self.tools, call.call_id, call.name, call.arguments, tool_context
                )
                state.actions.append(action)
                segment.items.append(self.tool_result_item(call, tool_output(action)))
        state.decision = f"stopped at the step limit ({self.max_steps})"
