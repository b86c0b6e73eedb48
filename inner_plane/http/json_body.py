"""A request body read as JSON, by the routes that read their own body: one rule for all of them
(strict JSON, as RFC 8259 has it: no ``NaN`` or ``Infinity``), and one short reason when a body
is not JSON, which each route words as its own error naming ``body``."""

from __future__ import annotations

import json
from typing import Any


class NotJson(ValueError):
    """The body is not a JSON document; ``reason`` says why, briefly."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _reject_constant(name: str) -> Any:
    raise NotJson(f"{name} is not valid JSON")


def json_document(body: bytes) -> Any:
    """The body's JSON document, or :class:`NotJson`. ``json.loads`` also reads UTF-16 and
    UTF-32 bodies (it detects them), as it always did here."""
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except NotJson:
        raise
    except json.JSONDecodeError as error:
        raise NotJson(error.msg) from None
    except UnicodeDecodeError:
        raise NotJson("not UTF-8") from None
    except RecursionError:
        raise NotJson("nested too deeply") from None
    except ValueError as error:
        raise NotJson(str(error)[:200]) from None
