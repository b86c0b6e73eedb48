"""Person tokens for tests of the conversation API: a person for the delegate (made on first
use), then the people module's own issue, revoke and authenticate."""

from __future__ import annotations

from inner_plane.people import directory
from inner_plane.runtime import Runtime
from inner_plane.sources import person_auth


class PersonTokens:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.issued: list[str] = []

    def issue(self, delegate_id: str, label: str = "default") -> str:
        if directory.get(self.runtime, delegate_id) is None:
            directory.add(self.runtime, delegate_id, display_name=delegate_id.title())
        _record, token = person_auth.issue_token(self.runtime, delegate_id, label)
        self.issued.append(token)
        return token

    def revoke(self, delegate_id: str, label: str) -> None:
        assert person_auth.revoke_token(self.runtime, delegate_id, label)

    authenticate = staticmethod(person_auth.authenticate_person)
