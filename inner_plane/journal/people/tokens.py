"""The ``person_tokens`` table: a person's bearer tokens, kept only as scrypt hashes (see
:mod:`inner_plane.sources.credentials`), several per delegate, one per label. Revoking deletes
the row, so the next request with that token finds nothing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    ForeignKey,
    Table,
    Text,
    UniqueConstraint,
    func,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import UUID, insert

from inner_plane.journal.database import reading
from inner_plane.journal.tables import METADATA

PERSON_TOKENS = Table(
    "person_tokens",
    METADATA,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column(
        "delegate_id",
        Text,
        ForeignKey(
            "people.delegate_id", ondelete="CASCADE", name="fk_person_tokens_delegate_id_people"
        ),
        nullable=False,
    ),
    Column("label", Text, nullable=False),
    Column("secret_hash", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("delegate_id", "label"),
)
_T = PERSON_TOKENS

# A write on a person's behalf that this process authorised from memory (the token verified
# before, its row not read again) runs only while the row still holds that hash: revoking
# deletes it. The parameters are :token (uuid), :token_hash and :delegate.
TOKEN_STILL_VALID = (
    "EXISTS (SELECT 1 FROM person_tokens pt WHERE pt.id = CAST(:token AS uuid) "
    "AND pt.delegate_id = :delegate AND pt.secret_hash = :token_hash)"
)


@dataclass(frozen=True)
class PersonToken:
    id: uuid.UUID
    delegate_id: str
    label: str
    secret_hash: str
    created_at: datetime

    def public(self) -> dict[str, str]:
        """Never the hash."""
        return {
            "delegate_id": self.delegate_id,
            "label": self.label,
            "created_at": self.created_at.isoformat(),
        }


class TokenLabelTaken(Exception):
    """The delegate already has a token with that label."""


class NoSuchPerson(Exception):
    """The delegate has no person (``delegates add`` first)."""


class PersonTokens:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(
        self, token_id: uuid.UUID, delegate_id: str, label: str, secret_hash: str
    ) -> PersonToken:
        """Raises NoSuchPerson or TokenLabelTaken, storing nothing."""
        people = METADATA.tables["people"]
        statement = (
            insert(_T)
            .from_select(
                ["id", "delegate_id", "label", "secret_hash"],
                select(
                    literal(token_id, UUID(as_uuid=True)),
                    people.c.delegate_id,
                    literal(label, Text),
                    literal(secret_hash, Text),
                ).where(people.c.delegate_id == delegate_id),
            )
            .on_conflict_do_nothing(index_elements=["delegate_id", "label"])
            .returning(*_T.c)
        )
        with self.engine.begin() as connection:
            row = connection.execute(statement).first()
            if row is None:
                person = connection.execute(
                    select(people.c.delegate_id).where(people.c.delegate_id == delegate_id)
                ).first()
                if person is None:
                    raise NoSuchPerson(delegate_id)
                raise TokenLabelTaken(label)
        return PersonToken(**row._mapping)

    def get(self, token_id: uuid.UUID) -> PersonToken | None:
        with reading(self.engine) as connection:
            row = connection.execute(select(_T).where(_T.c.id == token_id)).first()
        return None if row is None else PersonToken(**row._mapping)

    def of(self, delegate_id: str) -> list[PersonToken]:
        """The delegate's tokens by label (index uq_person_tokens_delegate_id_label)."""
        with reading(self.engine) as connection:
            rows = connection.execute(
                select(_T).where(_T.c.delegate_id == delegate_id).order_by(_T.c.label)
            )
            return [PersonToken(**row._mapping) for row in rows]

    def revoke(self, delegate_id: str, label: str) -> bool:
        with self.engine.begin() as connection:
            deleted = connection.execute(
                _T.delete().where(_T.c.delegate_id == delegate_id, _T.c.label == label)
            )
            return bool(deleted.rowcount)
