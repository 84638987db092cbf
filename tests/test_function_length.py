"""No product function is longer than 80 lines (``analysis/``, ``precompute/``, ``pages/``, ``app.py``):
past that a reader cannot hold a function in view, and its steps deserve names. Counted as Python's
ast does, ``end_lineno - lineno + 1``, docstring included."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80


def long_functions() -> dict[str, int]:
    """``{"path::name": lines}`` of every product function over :data:`LIMIT` lines."""
    files = [p for d in ("analysis", "precompute", "pages") for p in sorted((ROOT / d).rglob("*.py"))]
    out = {}
    for path in files + [ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > LIMIT:
                    out[f"{path.relative_to(ROOT).as_posix()}::{node.name}"] = n
    return out


def test_no_product_function_is_over_80_lines():
    found = long_functions()
    assert not found, f"functions over {LIMIT} lines (split them into named steps): {found}"
