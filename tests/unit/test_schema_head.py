"""The schema gate's fast path (a CLI command, `status`) compares the database's version row with
the newest migration file's name instead of loading Alembic: that name must be Alembic's one
head, and every revision id its file's name."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from inner_plane.journal import database, plain


def test_the_newest_migration_file_is_alembics_one_head() -> None:
    script = ScriptDirectory.from_config(database.alembic_config("postgresql://unused/unused"))
    assert script.get_heads() == [plain.code_head()]
    for revision in script.walk_revisions():
        assert revision.path is not None
        assert revision.revision == revision.path.rsplit("/", 1)[-1].removesuffix(".py")
