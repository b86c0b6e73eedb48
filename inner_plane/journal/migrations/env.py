"""Alembic environment: online migrations only (the plane always has a live database)."""

from alembic import context
from sqlalchemy import create_engine, pool

from inner_plane.journal.schema import metadata

target_metadata = metadata
config = context.config


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        # One migrator at a time: two processes starting together must not both run DDL.
        connection.exec_driver_sql("SELECT pg_advisory_lock(774411)")
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        connection.exec_driver_sql("SELECT pg_advisory_unlock(774411)")
        connection.commit()
    engine.dispose()


run_migrations_online()
