"""The source keeps its own layout rules: no private name crosses a module (a name
another module needs is public in its own), each class lives whole in one module
(no chain of subclasses cut across files), and no module imports back, directly or
through others, from a module that imports it (no import circle)."""

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


_COMPILED = {p.name.split(".")[0] for p in (Path(__file__).parent.parent / "src" / "crawlq")
             .rglob("_*.c*") if p.suffix in (".c", ".cc")}
"""The project's C and C++ extension modules (``_speedups``, ``serve/_edge``): each the
compiled side of the one module that uses it, named private as such modules are."""


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
                    if private and alias.name not in _COMPILED and \
                            (node.module or "").split(".")[-1] not in _COMPILED and \
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


def _module_names() -> dict[str, str]:
    """Each crawlq module's dotted name, by its file (relative to SRC)."""
    out = {}
    for rel in _modules():
        parts = ["crawlq", *Path(rel).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[rel] = ".".join(parts)
    return out


def _imported(module: str, is_package: bool, tree: ast.Module, known: set[str]) -> set[str]:
    """The crawlq modules a module imports anywhere: at its top, in a function, or for
    the type checker only (``if TYPE_CHECKING:``, a circle all the same). ``from X
    import y`` names module ``X.y`` when there is one, else ``X`` (a name ``X``
    defines). The packages above a module, which Python runs first, are not counted:
    they are not what its author chose to import."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
    return (out & known) - {module}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``graph`` (its modules in order, the first again at the
    end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done (no circle through it)
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*path[path.index(n):], n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_circle() -> None:
    """No crawlq module imports one that imports it back, directly or through others:
    each part stands on parts below it (the command line on the crawler and the server,
    never the other way), so each can be read, loaded and tested without the ones
    above it."""
    names = _module_names()
    known = set(names.values())
    graph = {names[rel]: _imported(names[rel], rel.endswith("__init__.py"), tree, known)
             for rel, tree in _modules().items()}
    circles = []
    while (circle := _circle(graph)) is not None:
        circles.append(" -> ".join(circle))
        graph[circle[0]].discard(circle[1])  # (then look for the next)
    assert not circles, "import circles:\n" + "\n".join(circles)


LOADERS_ON_PUBLIC_CALLS = ("stores/memory.py", "stores/redis_store.py", "stores/sqlite.py")
"""The stores with a dump loader (``_Loader``): each uses none of its store's private
names."""


def _store_reaches(cls: ast.ClassDef, store_class: str) -> list[str]:
    """``cls``'s uses of its store's private names: ``X._name`` where X is the store
    (``self.store``, ``self._store``, a ``store`` name, or the store's class)."""
    def is_store(node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id == "self" and node.attr in ("store", "_store")
        return isinstance(node, ast.Name) and node.id in ("store", "_store", store_class)

    return [f"{cls.name}:{n.lineno}: {ast.unparse(n)}" for n in ast.walk(cls)
            if isinstance(n, ast.Attribute) and n.attr.startswith("_")
            and not n.attr.startswith("__") and is_store(n.value)]


def test_a_stores_loader_uses_its_stores_public_calls() -> None:
    """A store's dump loader (its ``_Loader``) writes through its store's public calls,
    or hands its writes to the store: it uses none of the store's private names."""
    modules = _modules()
    found = []
    for name in LOADERS_ON_PUBLIC_CALLS:
        tree = modules[name]
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        store = next(c.name for c in classes if c.name.endswith("Store"))
        loaders = [c for c in classes if c.name == "_Loader"]
        assert loaders, f"{name} has no _Loader"
        for cls in loaders:
            found += [f"{name}: {r}" for r in _store_reaches(cls, store)]
    assert not found, "\n".join(found)
