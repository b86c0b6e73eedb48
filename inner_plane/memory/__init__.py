"""The delegate's memory: standing memories (always in context) and learned memories (recalled
by cue), and the signals a memory write publishes according to its relation.

Owns the memory API. May import ``publish``, ``journal``, ``runtime`` and the pure layer."""

from inner_plane.memory.store import (
    Memory,
    MemoryInputError,
    MemoryKind,
    MemoryWrite,
    Relation,
    list_memories,
    recall,
    remember,
)

__all__ = [
    "Memory",
    "MemoryInputError",
    "MemoryKind",
    "MemoryWrite",
    "Relation",
    "list_memories",
    "recall",
    "remember",
]
