""" "Due", "fenced" and "a live lease" are each written once, in ``journal/predicates.py``: a
copy of any of them in the SQL of any other module of ``journal/`` or ``lane/`` fails this
test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import inner_plane
from inner_plane.journal import predicates

PACKAGE = Path(inner_plane.__file__).parent
HOME = Path(predicates.__file__)

# The distinctive part of each rule, as it would appear in a copy.
RULES = {
    "due": re.compile(r"available_at\s*<=\s*(now|clock_timestamp)\(\)", re.IGNORECASE),
    "fenced": re.compile(r"\bFOR\s+SHARE\b|SELECT\s+epoch\s+FROM\s+leases", re.IGNORECASE),
    "lease live": re.compile(
        r"holder\s+IS\s+NOT\s+NULL\s+AND\s+(\w+\.)?expires_at\s*>\s*now\(\)", re.IGNORECASE
    ),
}


def sql_strings(path: Path) -> list[str]:
    """Every string literal of a module except docstrings (f-string parts included)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def copies(paths: list[Path], root: Path = PACKAGE) -> list[str]:
    found = []
    for path in paths:
        for literal in sql_strings(path):
            for rule, pattern in RULES.items():
                if pattern.search(literal):
                    found.append(f"{path.relative_to(root)}: {rule}: {literal.strip()[:80]}")
    return found


def scanned() -> list[Path]:
    paths = sorted((PACKAGE / "journal").rglob("*.py")) + sorted((PACKAGE / "lane").rglob("*.py"))
    return [p for p in paths if p != HOME and "migrations" not in p.parts]


def test_no_module_but_predicates_writes_due_fenced_or_lease_live() -> None:
    assert copies(scanned()) == []


def test_the_check_catches_a_copy(tmp_path: Path) -> None:
    copy = tmp_path / "copy.py"
    copy.write_text(
        '"""FOR SHARE in a docstring is fine."""\n'
        'A = "SELECT 1 FROM signals WHERE available_at <= now()"\n'
        'B = f"SELECT epoch FROM leases WHERE delegate_id = {1} FOR SHARE"\n'
        'C = "SELECT count(*) FROM leases l WHERE l.holder IS NOT NULL AND l.expires_at > now()"\n'
    )
    found = {line.split(": ")[1] for line in copies([copy], tmp_path)}
    assert found == {"due", "fenced", "lease live"}


def test_the_definitions_hold_the_rules() -> None:
    assert RULES["due"].search(predicates.due())
    assert RULES["fenced"].search(predicates.FENCED_EPOCH)
    assert RULES["lease live"].search(predicates.lease_live(alias="l"))
    assert predicates.lease_live() == "holder IS NOT NULL AND expires_at > now()"
    assert predicates.due(of=None).startswith("state = 'pending'")
    assert "delegate_id = :delegate" in predicates.due()
    assert predicates.due(predicates.WAKING, of="d.delegate_id", alias="s") == (
        "s.delegate_id = d.delegate_id AND s.state = 'pending' "
        "AND s.mode IN ('wake', 'interrupt') AND s.available_at <= now() "
        "AND (s.expires_at IS NULL OR s.expires_at > now())"
    )
