"""The journal: PostgreSQL is the truth. Nothing outside this package issues SQL."""
