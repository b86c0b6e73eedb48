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
- an input longer than ``max_input_chars`` is refused with ``context_length_exceeded`` (the
  context window: 4 characters of the JSON input count as a token);
- ``POST /v1/responses/compact`` answers as documented: ``object: response.compaction`` whose
  ``output`` is the kept user messages followed by one ``compaction`` item with its
  ``encrypted_content``, and ``usage``. This server keeps the newest user messages up to
  ``kept_user_chars`` and issues an ``encrypted_content`` of ``compaction_chars`` characters
  (the size a real summary costs) sealed with an HMAC; it remembers what each item replaced;
- ``context_management=[{"type": "compaction", "compact_threshold": N}]`` on a call whose input
  passes N tokens puts a compaction item of the same kind first in the output;
- a ``compaction`` item in input whose ``encrypted_content`` this server did not issue, or that
  was altered, is refused (400, "could not be verified").

:meth:`ResponsesServer.decoded` expands the compaction items of an input into the items they
replaced (recursively), so a test can check what reached the model across compactions.
``compact_faults`` script failures of the compact endpoint only (429, 500, a stall, a refusal:
a 200 whose output holds a refusal message and no compaction item).

Streams follow the documented event sequence (``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta``
…, ``response.function_call_arguments.delta``…, ``response.output_item.done``,
``response.completed``), each with its ``sequence_number``. Replies come from ``script``
(popped per answered request) or ``policy(conversation)``; items are built with
:func:`message`, :func:`function_call` and :func:`reasoning`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import uuid
from collections.abc import Callable
from typing import Any

from tests.support.model_wire import Fault, ModelServer, WireError

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


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def _compact_threshold(management: object) -> int | None:
    """The compaction threshold of a ``context_management`` list (400 if malformed)."""
    if not isinstance(management, list):
        raise WireError(400, "Invalid type for 'context_management'.", param="context_management")
    threshold = None
    for index, entry in enumerate(management):
        if not isinstance(entry, dict) or entry.get("type") != "compaction":
            raise WireError(
                400,
                f"Invalid value for 'context_management[{index}].type'.",
                param=f"context_management[{index}].type",
            )
        value = entry.get("compact_threshold")
        if value is not None and (not isinstance(value, int) or value < 1000):
            raise WireError(
                400,
                f"Invalid 'context_management[{index}].compact_threshold': must be an integer "
                "of at least 1000.",
                param=f"context_management[{index}].compact_threshold",
            )
        threshold = value
    return threshold


class ResponsesServer(ModelServer):
    path = "/v1/responses"
    other_paths = ("/v1/responses/compact",)

    def __init__(self, *, max_input_chars: int | None = None, policy: Policy | None = None):
        super().__init__(max_input_chars=max_input_chars)
        self.script: list[dict[str, Any] | list[dict[str, Any]]] = []
        self.policy = policy
        self._encrypted: dict[str, str] = {}  # reasoning id -> the encrypted content issued
        self._stored_items: set[str] = set()  # item ids kept under store=true
        self._needs_reasoning: dict[str, str] = {}  # function call item id -> its reasoning id
        self._stored: dict[str, list[dict[str, Any]]] = {}  # response id -> input + output
        self._seal_key = secrets.token_bytes(32)
        self._compacted: dict[str, list[dict[str, Any]]] = {}  # compaction id -> replaced items
        self.compaction_chars = 1_200
        self.kept_user_chars = 2_000
        self.compact_faults: list[Fault] = []

    # --- compaction --------------------------------------------------------------------------

    def _seal(self, compaction_id: str) -> str:
        filler = base64.urlsafe_b64encode(secrets.token_bytes(self.compaction_chars * 3 // 4))
        payload = f"{compaction_id}.{filler.decode()}".encode()
        mac = hmac.new(self._seal_key, payload, hashlib.sha256).hexdigest()
        return base64.urlsafe_b64encode(payload).decode() + "." + mac

    def _unseal(self, encrypted: object) -> str | None:
        """The compaction id sealed in ``encrypted``, or None unless this server issued it
        unaltered."""
        if not isinstance(encrypted, str) or "." not in encrypted:
            return None
        body, _, mac = encrypted.rpartition(".")
        try:
            payload = base64.urlsafe_b64decode(body.encode())
        except ValueError:
            return None
        expected = hmac.new(self._seal_key, payload, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, mac):
            return None
        compaction_id = payload.decode(errors="replace").partition(".")[0]
        return compaction_id if compaction_id in self._compacted else None

    def decoded(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``items`` with every compaction item this server issued replaced by what it
        replaced, recursively."""
        out: list[dict[str, Any]] = []
        for item in items:
            if isinstance(item, dict) and item.get("type") == "compaction":
                compaction_id = self._unseal(item.get("encrypted_content"))
                if compaction_id is not None:
                    out.extend(self._compacted[compaction_id])
                    continue
            out.append(item)
        return out

    def _issue(self, compaction_id: str, replaced: list[dict[str, Any]]) -> dict[str, Any]:
        self._compacted[compaction_id] = self.decoded(replaced)
        return {
            "type": "compaction",
            "id": compaction_id,
            "encrypted_content": self._seal(compaction_id),
        }

    def fault_at(self, path: str) -> Fault | None:
        return self.compact_faults.pop(0) if self.compact_faults else None

    def answer_at(
        self, path: str, body: dict[str, Any], stream: bool, fault: Fault | None
    ) -> tuple[dict[str, Any], list[Any]]:
        if stream:
            raise WireError(400, "Unknown parameter: 'stream'.", param="stream")
        conversation = self._conversation({**body, "store": False})
        self.last_scripted = None
        response_id = f"resp_{uuid.uuid4().hex}"
        usage = _usage(self.input_chars(body) // 4 + 1, self.compaction_chars // 4, 0)
        base = {
            "id": response_id,
            "object": "response.compaction",
            "created_at": 1_764_489_600,
            "usage": usage,
        }
        if fault is not None and fault.refuse:
            refused = {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}],
            }
            return {**base, "output": [refused]}, []
        kept: list[dict[str, Any]] = []
        room = self.kept_user_chars
        for item in reversed(conversation):
            if item.get("type", "message") != "message" or item.get("role") != "user":
                continue
            text = _text(item.get("content"))
            if len(text) > room:
                break
            room -= len(text)
            kept.insert(
                0,
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex}",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                },
            )
        compaction_item = self._issue(f"cmp_{uuid.uuid4().hex}", conversation)
        return {**base, "output": [*kept, compaction_item]}, []

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
        elif kind == "compaction":
            if self._unseal(item.get("encrypted_content")) is None:
                raise WireError(
                    400,
                    f"The encrypted content for item {item.get('id')} could not be verified.",
                    param=f"input[{index}]",
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
        management = body.get("context_management")
        if management is not None:
            threshold = _compact_threshold(management)
            if (
                threshold is not None
                and self.input_chars(body) // 4 > threshold
                and not any(item["type"] == "compaction" for item in output)
            ):
                output.insert(0, compaction())
        last_reasoning: str | None = None
        for item in output:
            if item["type"] == "reasoning":
                token = "enc_" + secrets.token_urlsafe(24)
                self._encrypted[item["id"]] = token
                if encrypt:
                    item["encrypted_content"] = token
                last_reasoning = item["id"]
            elif item["type"] == "compaction":
                item.update(self._issue(item["id"], conversation))
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
