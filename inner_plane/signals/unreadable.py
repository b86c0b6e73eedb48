"""The key a journal reader puts in place of data it could not parse (see journal.tolerant).

A module of its own: the journal's plain reads (`status`, `signals show`) use it without loading
the signal models."""

UNREADABLE_DATA = "__unreadable__"
