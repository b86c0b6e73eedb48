"""All access to the ``processors`` table: external processors, their credentials and grants."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, cast

from sqlalchemy import (
    ARRAY,
    Boolean,
    CheckConstraint,
    DateTime,
    Engine,
    Integer,
    Row,
    Table,
    Text,
    UniqueConstraint,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import UUID, insert
from sqlalchemy.orm import Mapped, mapped_column

from inner_plane.journal.database import reading
from inner_plane.journal.declarative import Base


class ProcessorRow(Base):
    __tablename__ = "processors"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    credential: Mapped[str] = mapped_column(Text, nullable=False)
    secret_hash: Mapped[str | None] = mapped_column(Text)
    signing_key: Mapped[str | None] = mapped_column(Text)
    kind_prefix: Mapped[str] = mapped_column(Text, nullable=False)
    delegates: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    max_mode: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'next-turn'"))
    trusted: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    rate_limit: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("600"))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    rotated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("name"),
        CheckConstraint("credential IN ('bearer', 'hmac')", name="credential"),
        CheckConstraint(
            "(credential = 'bearer' AND secret_hash IS NOT NULL AND signing_key IS NULL) OR "
            "(credential = 'hmac' AND signing_key IS NOT NULL AND secret_hash IS NULL)",
            name="secret",
        ),
        CheckConstraint(
            "max_mode IN ('ambient', 'next-turn', 'wake', 'interrupt')",
            name="max_mode",
        ),
        CheckConstraint("rate_limit > 0", name="rate_limit"),
    )


class ProcessorJson(TypedDict):
    """A processor as operators see it: never the secret or its hash."""

    name: str
    credential: str
    kind_prefix: str
    delegates: list[str]
    max_mode: str
    trusted: bool
    rate_limit: int
    created_at: str
    rotated_at: str | None
    revoked_at: str | None


@dataclass(frozen=True)
class Processor:
    """A registered external processor as read from the journal."""

    id: uuid.UUID
    name: str
    credential: str
    secret_hash: str | None
    signing_key: str | None
    kind_prefix: str
    delegates: tuple[str, ...]
    max_mode: str
    trusted: bool
    rate_limit: int
    created_at: datetime
    rotated_at: datetime | None
    revoked_at: datetime | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def public(self) -> ProcessorJson:
        """What operators may see: never the secret or its hash."""
        return ProcessorJson(
            name=self.name,
            credential=self.credential,
            kind_prefix=self.kind_prefix,
            delegates=list(self.delegates),
            max_mode=self.max_mode,
            trusted=self.trusted,
            rate_limit=self.rate_limit,
            created_at=self.created_at.isoformat(),
            rotated_at=None if self.rotated_at is None else self.rotated_at.isoformat(),
            revoked_at=None if self.revoked_at is None else self.revoked_at.isoformat(),
        )


class ProcessorExists(Exception):
    """A processor with that name is already registered (revoked names stay taken)."""


_T = cast(Table, ProcessorRow.__table__)


def _to_processor(row: Row[Any]) -> Processor:
    values = dict(row._mapping)
    values["delegates"] = tuple(values["delegates"])
    return Processor(**values)


class ProcessorJournal:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(
        self,
        name: str,
        credential: str,
        *,
        secret_hash: str | None,
        signing_key: str | None,
        kind_prefix: str,
        delegates: list[str],
        max_mode: str,
        trusted: bool,
        rate_limit: int,
    ) -> Processor:
        statement = (
            insert(_T)
            .values(
                id=uuid.uuid4(),
                name=name,
                credential=credential,
                secret_hash=secret_hash,
                signing_key=signing_key,
                kind_prefix=kind_prefix,
                delegates=delegates,
                max_mode=max_mode,
                trusted=trusted,
                rate_limit=rate_limit,
            )
            .on_conflict_do_nothing(index_elements=["name"])
            .returning(*_T.c)
        )
        with self.engine.begin() as connection:
            row = connection.execute(statement).first()
        if row is None:
            raise ProcessorExists(name)
        return _to_processor(row)

    def get(self, name: str) -> Processor | None:
        with reading(self.engine) as connection:
            row = connection.execute(select(_T).where(_T.c.name == name)).first()
        return None if row is None else _to_processor(row)

    def list(self) -> list[Processor]:
        with reading(self.engine) as connection:
            rows = connection.execute(select(_T).order_by(_T.c.name))
            return [_to_processor(row) for row in rows]

    def revoke(self, name: str) -> Processor | None:
        """Mark the processor revoked (idempotent); None if there is no such processor."""
        statement = (
            update(_T)
            .where(_T.c.name == name)
            .values(revoked_at=func.coalesce(_T.c.revoked_at, func.now()))
            .returning(*_T.c)
        )
        with self.engine.begin() as connection:
            row = connection.execute(statement).first()
        return None if row is None else _to_processor(row)

    def rotate(
        self, name: str, *, secret_hash: str | None, signing_key: str | None
    ) -> Processor | None:
        """Replace the credential of a live processor; None if unknown or revoked."""
        statement = (
            update(_T)
            .where(_T.c.name == name, _T.c.revoked_at.is_(None))
            .values(secret_hash=secret_hash, signing_key=signing_key, rotated_at=func.now())
            .returning(*_T.c)
        )
        with self.engine.begin() as connection:
            row = connection.execute(statement).first()
        return None if row is None else _to_processor(row)
