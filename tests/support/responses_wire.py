"""A strict local server speaking the OpenAI Responses API (POST /v1/responses), JSON or SSE.

It enforces the documented rules an adapter gets wrong in production:

- a reasoning item replayed without ``encrypted_content`` under ``store=false`` is refused
  (404 "Item with id 'rs_…' not found. Items are not persisted when `store` is set to
  false…"), and encrypted content it did not issue is refused; ``encrypted_content`` is only
  returned when ``include`` asks for ``reasoning.encrypted_content``;
- a function call this server issued after a reasoning item must be replayed with that item;
- every ``function_call_output`` answers an earlier ``function_call`` with the same call id,
  and every function call is answered;
- ``previous_response_id`` names a stored response (``store`` defaults to true, as in the
  API), whose input and output are prepended;
- an input longer than ``max_input_chars`` is refused with ``context_length_exceeded``.

Streams follow the documented event sequence (``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta``
…, ``response.function_call_arguments.delta``…, ``response.output_item.done``,
``response.completed``), each with its ``sequence_number``. Replies come from ``script``
(popped per answered request) or ``policy(conversation)``; items are built with
:func:`message`, :func:`function_call` and :func:`reasoning`.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable
from typing import Any

from tests.support.model_wire import ModelServer, WireError

INCLUDABLE = {
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "file_search_call.results",
    "web_search_call.results",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "input_image.image_url",
    "message.input_image.image_url",
}
ITEM_TYPES = {"message", "function_call", "function_call_output", "reasoning", "compaction"}
ROLES = {"system", "developer", "user", "assistant"}


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def function_call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex}",
        "call_id": f"call_{uuid.uuid4().hex[:12]}",
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        "status": "completed",
    }


def reasoning(summary: str = "") -> dict[str, Any]:
    """A reasoning item; the server fills in its id's encrypted content when asked to."""
    return {
        "type": "reasoning",
        "id": f"rs_{uuid.uuid4().hex}",
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
    }


def compaction() -> dict[str, Any]:
    return {"type": "compaction", "id": f"cmp_{uuid.uuid4().hex}", "encrypted_content": "opaque"}


def response(output: list[dict[str, Any]], input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A scripted reply with fixed usage (otherwise usage is estimated from the sizes)."""
    return {"output": output, "usage": _usage(input_tokens, output_tokens, 0)}


def _usage(input_tokens: int, output_tokens: int, reasoning_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


Policy = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


class ResponsesServer(ModelServer):
    path = "/v1/responses"

    def __init__(self, *, max_input_chars: int | None = None, policy: Policy | None = None):
        super().__init__(max_input_chars=max_input_chars)
        self.script: list[dict[str, Any] | list[dict[str, Any]]] = []
        self.policy = policy
        self._encrypted: dict[str, str] = {}  # reasoning id -> the encrypted content issued
        self._stored_items: set[str] = set()  # item ids kept under store=true
        self._needs_reasoning: dict[str, str] = {}  # function call item id -> its reasoning id
        self._stored: dict[str, list[dict[str, Any]]] = {}  # response id -> input + output

    def input_chars(self, body: dict[str, Any]) -> int:
        return len(json.dumps(body.get("input", "")))

    def context_too_long(self, chars: int) -> WireError:
        return WireError(
            400,
            "Your input exceeds the context window of this model. Please adjust your input "
            "and try again.",
            param="input",
            code="context_length_exceeded",
        )

    # --- validation --------------------------------------------------------------------------

    def _conversation(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise WireError(400, "Missing required parameter: 'model'.", param="model")
        for name in body.get("include") or []:
            if name not in INCLUDABLE:
                raise WireError(400, f"Invalid value: '{name}'.", param="include")
        for tool in body.get("tools") or []:
            if tool.get("type") == "function" and not tool.get("name"):
                raise WireError(400, "Missing required parameter: 'tools[0].name'.")
        raw = body.get("input")
        items: list[dict[str, Any]]
        if isinstance(raw, str):
            items = [{"role": "user", "content": raw}]
        elif isinstance(raw, list):
            items = raw
        else:
            raise WireError(400, "Missing required parameter: 'input'.", param="input")
        previous = body.get("previous_response_id")
        before: list[dict[str, Any]] = []
        if previous is not None:
            if previous not in self._stored:
                raise WireError(
                    400,
                    f"Previous response with id '{previous}' not found.",
                    param="previous_response_id",
                )
            before = self._stored[previous]
        store = body.get("store", True) is not False
        for index, item in enumerate(items):
            self._check_item(index, item, items, store)
        conversation = before + items
        called = set()
        answered = set()
        for item in conversation:
            if item.get("type") == "function_call":
                called.add(item["call_id"])
            elif item.get("type") == "function_call_output":
                if item.get("call_id") not in called:
                    raise WireError(
                        400,
                        "No tool call found for function call output with call_id "
                        f"{item.get('call_id')}.",
                        param="input",
                    )
                answered.add(item["call_id"])
        for call_id in sorted(called - answered):
            message = f"No tool output found for function call {call_id}."
            raise WireError(400, message, param="input")
        return conversation

    def _check_item(
        self, index: int, item: dict[str, Any], items: list[dict[str, Any]], store: bool
    ) -> None:
        kind = item.get("type", "message" if "role" in item else None)
        if kind not in ITEM_TYPES:
            raise WireError(
                400,
                f"Invalid value: '{kind}'. Supported values are: "
                + ", ".join(f"'{t}'" for t in sorted(ITEM_TYPES))
                + ".",
                param=f"input[{index}].type",
            )
        if kind == "message":
            if item.get("role") not in ROLES:
                raise WireError(400, f"Invalid value: '{item.get('role')}'.", param="role")
            if not isinstance(item.get("content"), str | list):
                raise WireError(400, "Missing required parameter: 'content'.")
        elif kind == "reasoning":
            item_id = str(item.get("id"))
            encrypted = item.get("encrypted_content")
            if encrypted is not None:
                if self._encrypted.get(item_id) != encrypted:
                    raise WireError(
                        400,
                        f"The encrypted content for item {item_id} could not be verified.",
                        param=f"input[{index}]",
                    )
            elif not store:
                raise WireError(
                    404,
                    f"Item with id '{item_id}' not found. Items are not persisted when `store` "
                    "is set to false. Try again with `store` set to true, or remove this item "
                    "from your input.",
                    param="input",
                )
            elif item_id not in self._stored_items:
                raise WireError(404, f"Item with id '{item_id}' not found.", param="input")
            following = items[index + 1] if index + 1 < len(items) else None
            if following is None or following.get("type") == "reasoning":
                raise WireError(
                    400,
                    f"Item '{item_id}' of type 'reasoning' was provided without its required "
                    "following item.",
                    param="input",
                )
        elif kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                if not isinstance(item.get(key), str):
                    raise WireError(400, f"Missing required parameter: 'input[{index}].{key}'.")
            needed = self._needs_reasoning.get(str(item.get("id")))
            if needed is not None and not any(
                i.get("type") == "reasoning" and i.get("id") == needed for i in items[:index]
            ):
                raise WireError(
                    400,
                    f"Item '{item.get('id')}' of type 'function_call' was provided without its "
                    f"required 'reasoning' item: '{needed}'.",
                    param="input",
                )
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise WireError(400, f"Missing required parameter: 'input[{index}].call_id'.")
            if not isinstance(item.get("output"), str | list):
                raise WireError(400, f"Missing required parameter: 'input[{index}].output'.")

    # --- answering ---------------------------------------------------------------------------

    def answer(
        self, body: dict[str, Any], stream: bool
    ) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        conversation = self._conversation(body)
        store = body.get("store", True) is not False
        encrypt = "reasoning.encrypted_content" in (body.get("include") or [])
        scripted: dict[str, Any] | list[dict[str, Any]]
        self.last_scripted = None
        if self.script:
            scripted = self.last_scripted = self.script.pop(0)
        elif self.policy is not None:
            scripted = self.policy(conversation)
        else:
            scripted = [message("ok")]
        if isinstance(scripted, list):
            scripted = {"output": scripted}
        output = [dict(item) for item in scripted["output"]]
        last_reasoning: str | None = None
        for item in output:
            if item["type"] == "reasoning":
                token = "enc_" + secrets.token_urlsafe(24)
                self._encrypted[item["id"]] = token
                if encrypt:
                    item["encrypted_content"] = token
                last_reasoning = item["id"]
            elif item["type"] == "function_call" and last_reasoning is not None:
                self._needs_reasoning[item["id"]] = last_reasoning
            if store and "id" in item:
                self._stored_items.add(item["id"])
        reasoning_count = sum(1 for i in output if i["type"] == "reasoning")
        usage = scripted.get("usage") or _usage(
            self.input_chars(body) // 4 + 1,
            len(json.dumps(output)) // 4 + 1,
            reasoning_count * 16,
        )
        response_id = f"resp_{uuid.uuid4().hex}"
        full = {
            "id": response_id,
            "object": "response",
            "created_at": 1_764_489_600,
            "status": "completed",
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "store": store,
            "previous_response_id": body.get("previous_response_id"),
            "usage": usage,
        }
        if store:
            self._stored[response_id] = conversation + output
        return full, (self._events(full) if stream else [])

    def _events(self, full: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []

        def emit(event: str, **data: Any) -> None:
            events.append((event, {"type": event, "sequence_number": len(events), **data}))

        started = {**full, "status": "in_progress", "output": [], "usage": None}
        emit("response.created", response=started)
        emit("response.in_progress", response=started)
        for index, item in enumerate(full["output"]):
            kind = item["type"]
            if kind == "message":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                for part_index, part in enumerate(item["content"]):
                    ids = {"item_id": item["id"], "output_index": index}
                    empty = {**part, "text": ""}
                    emit("response.content_part.added", **ids, content_index=part_index, part=empty)
                    text = part.get("text", "")
                    for start in range(0, len(text), 8):
                        emit(
                            "response.output_text.delta",
                            **ids,
                            content_index=part_index,
                            delta=text[start : start + 8],
                            logprobs=[],
                        )
                    emit(
                        "response.output_text.done",
                        **ids,
                        content_index=part_index,
                        text=text,
                        logprobs=[],
                    )
                    emit("response.content_part.done", **ids, content_index=part_index, part=part)
            elif kind == "function_call":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                arguments = item["arguments"]
                for start in range(0, len(arguments), 16):
                    emit(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=arguments[start : start + 16],
                    )
                emit(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=arguments,
                )
            else:
                # The added event of a reasoning item carries no (or incomplete) encrypted
                # content: clients must take the item from output_item.done.
                added = {k: v for k, v in item.items() if k != "encrypted_content"}
                emit("response.output_item.added", output_index=index, item=added)
            emit("response.output_item.done", output_index=index, item=item)
        emit("response.completed", response=full)
        return events
