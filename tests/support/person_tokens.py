"""Person tokens for tests of the conversation API: issue, revoke, authenticate, under the
contract of ``inner_plane.sources.person_auth.authenticate_person`` (raise AuthError on a bad
or revoked token)."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass

from inner_plane.runtime import Runtime
from inner_plane.sources import auth


@dataclass(frozen=True)
class Principal:
    delegate_id: str
    label: str
    token_id: uuid.UUID


class PersonTokens:
    def __init__(self) -> None:
        self.tokens: dict[str, Principal] = {}

    def issue(self, delegate_id: str, label: str = "default") -> str:
        token_id = uuid.uuid4()
        token = f"ipp.{token_id.hex}.{secrets.token_urlsafe(24)}"
        self.tokens[token] = Principal(delegate_id, label, token_id)
        return token

    def revoke(self, delegate_id: str, label: str) -> None:
        for token, principal in list(self.tokens.items()):
            if (principal.delegate_id, principal.label) == (delegate_id, label):
                del self.tokens[token]

    def authenticate(self, runtime: Runtime, token: str | None, client: str | None) -> Principal:
        found = None if token is None else self.tokens.get(token)
        if found is None:
            raise auth.AuthError("unknown or revoked person token")
        return found
