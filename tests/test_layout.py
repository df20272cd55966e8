"""The source keeps its own layout rules: no private name crosses a module (a name
another module needs is public in its own), and each class lives whole in one module
(no chain of subclasses cut across files)."""

from __future__ import annotations

import ast
from pathlib import Path

import crawlq

SRC = Path(crawlq.__file__).parent


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(SRC)): ast.parse(p.read_text("utf-8"))
            for p in sorted(SRC.rglob("*.py"))}


def _private_defined(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, module names, attributes
    set on ``self`` and class-level names."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


def test_no_private_name_crosses_a_module() -> None:
    """A module uses another module's private names neither by import nor as attributes
    of its objects. (Private names of other packages, like aiohttp's, are their
    business: only names some crawlq module defines count.)"""
    modules = _modules()
    defined = {name: _private_defined(tree) for name, tree in modules.items()}
    ours = set().union(*defined.values())
    found = []
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and (node.module or "").split(".")[-1] != "_speedups" and \
                            (node.level or (node.module or "").startswith("crawlq")):
                        found.append(f"{name}: imports {alias.name} from {node.module}")
            elif isinstance(node, ast.Attribute):
                attr = node.attr
                if not attr.startswith("_") or attr.startswith("__"):
                    continue
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if attr in ours and attr not in defined[name]:
                    found.append(f"{name}:{node.lineno}: uses {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_no_class_extends_a_class_of_another_crawlq_module() -> None:
    """Classes are whole: none extends a class defined in another crawlq module, except
    the declared protocols and error types, the contract parts a test suite assembles,
    and plug points made to be subclassed (QueuePolicy)."""
    modules = _modules()
    classes = {node.name: name for name, tree in modules.items()
               for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    allowed = {"CrawlqError", "StoreError", "ConfigError", "QueuePolicy"}
    found = []
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                base_name = base.attr if isinstance(base, ast.Attribute) else \
                    base.id if isinstance(base, ast.Name) else None
                home = classes.get(base_name or "")
                if home is None or home == name or base_name in allowed:
                    continue
                if name.startswith("testing/") or "Error" in (base_name or ""):
                    continue  # (the contract suite's parts; error hierarchies)
                found.append(f"{name}: {node.name}({base_name}) from {home}")
    assert not found, "\n".join(found)
