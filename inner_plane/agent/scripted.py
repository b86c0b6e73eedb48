"""A scripted agent for tests: deterministic steps, optional failure, no model.

Configured by a JSON script (``INNER_PLANE_AGENT_SCRIPT`` for worker processes):
``{"steps": 2, "step_s": 0.1, "fail_kinds": ["test.poison"], "disposition": "acted",
"reply": "ok", "reason": "why", "fail_while": "/tmp/flag", "user_turn_steps": 0,
"calls": [{"name": "set_timer", "arguments": {"purpose": "p", "every_s": 60}}]}``
(``fail_while``: fail only while that file exists; ``user_turn_steps``: the steps of a user
turn, if not ``steps``; ``calls``: tool calls made through the plane's tool registry, one at the
start of each step, as a model's would be: same effect keys, fence and ``caused_by``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from inner_plane.activation import AgentResult, Disposition, Settlement, WorkingContext
from inner_plane.agent.model_calls import call_tool
from inner_plane.agent.port import StepGuard
from inner_plane.runtime import Runtime
from inner_plane.tools import ToolContext, ToolRegistry


class ScriptFailure(RuntimeError):
    pass


class ScriptedAgent:
    name = "scripted"

    def __init__(
        self,
        script: dict[str, Any] | None = None,
        runtime: Runtime | None = None,
        tools: ToolRegistry | None = None,
    ) -> None:
        script = script or {}
        self.calls: list[dict[str, Any]] = list(script.get("calls", []))
        self.runtime = runtime
        self.tools = tools
        self.steps = int(script.get("steps", 1))
        turn_steps = script.get("user_turn_steps")
        self.user_turn_steps = self.steps if turn_steps is None else int(turn_steps)
        self.step_s = float(script.get("step_s", 0.0))
        self.fail_kinds = set(script.get("fail_kinds", []))
        # Fail those kinds only while this file exists (a test removes it to let a retry pass).
        fail_while = script.get("fail_while")
        self.fail_while = None if fail_while is None else Path(fail_while)
        self.disposition = Disposition(script.get("disposition", "acted"))
        # The settlements' reason (for needs_input: the question put to the person).
        self.reason = str(script.get("reason", "scripted"))
        self.reply = script.get("reply")
        self.seen: list[WorkingContext] = []

    @classmethod
    def from_json(
        cls, text: str | None, runtime: Runtime | None = None, tools: ToolRegistry | None = None
    ) -> ScriptedAgent:
        return cls(json.loads(text) if text else None, runtime, tools)

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        self.seen.append(context)
        actions: list[dict[str, Any]] = []
        settlements: dict[Any, Settlement] = {}
        steps = self.steps if context.activation.user_message is None else self.user_turn_steps
        for step in range(steps):
            if step < len(self.calls):
                actions.append(self._call(step, context, guard, settlements))
            time.sleep(self.step_s)
            guard.safe_point()
        failing = [s.kind for s in context.activation.signals if s.kind in self.fail_kinds]
        if failing and (self.fail_while is None or self.fail_while.exists()):
            raise ScriptFailure(f"scripted failure for {', '.join(sorted(set(failing)))}")
        return AgentResult(
            settlements={
                signal_id: Settlement(self.disposition, self.reason)
                for signal_id in context.rendered_signal_ids
            },
            reply=self.reply,
            decision="scripted",
            tool_actions=actions
            or [{"tool": "scripted.step", "key": guard.effect_key(i)} for i in range(steps)],
        )

    def _call(
        self,
        step: int,
        context: WorkingContext,
        guard: StepGuard,
        settlements: dict[Any, Settlement],
    ) -> dict[str, Any]:
        if self.runtime is None or self.tools is None:
            raise ScriptFailure("a script with calls needs the runtime and the tools")
        call = self.calls[step]
        tool_context = ToolContext(
            runtime=self.runtime,
            activation=context.activation,
            rendered_signal_ids=frozenset(context.rendered_signal_ids),
            guard=guard,
            step=step,
            settlements=settlements,
        )
        arguments = json.dumps(call.get("arguments", {}))
        return call_tool(self.tools, f"call-{step}", str(call["name"]), arguments, tool_context)
