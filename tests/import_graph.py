"""The import graph of a Python package, read with :mod:`ast` (no module is imported).

Helper of ``tests/test_import_rules.py``; also a script: ``python tests/import_graph.py [package_dir]`` prints
module sizes, the number of intra-package import edges and the import cycles.

Every ``import`` / ``from ... import`` statement counts, including those inside functions (late imports
hide cycles rather than remove them). An edge goes to the most specific module that exists:
``from prh_lib.metrics import knn`` is an edge to ``prh_lib.metrics.knn``, ``from .metrics import
mutual_knn`` an edge to ``prh_lib.metrics``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_names(package_dir: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` of every ``.py`` file under ``package_dir`` (a package folder)."""
    package_dir = Path(package_dir)
    root = package_dir.name
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([root, *parts])] = path
    return out


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package, or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, source: str, modules: set[str], *, is_package: bool = False) -> set[str]:
    """Modules of the package that ``source`` (the text of ``module``) imports."""
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # "from pkg import sub" names a submodule when pkg.sub is one; else an attribute of pkg
            targets = [f"{stem}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            hit = _resolve(target, modules)
            if hit is not None and hit != module:
                out.add(hit)
    return out


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the package's own modules."""
    files = module_names(package_dir)
    names = set(files)
    return {m: imports_of(m, p.read_text(), names, is_package=p.name == "__init__.py") for m, p in files.items()}


def edge_count(graph: dict[str, set[str]]) -> int:
    return sum(len(v) for v in graph.values())


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted; sorted by first name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def group_graph(graph: dict[str, set[str]], *, depth: int = 2) -> dict[str, set[str]]:
    """The graph between groups: modules cut to their first ``depth`` name parts (``prh_lib.analysis``)."""
    def cut(m: str) -> str:
        return ".".join(m.split(".")[:depth])

    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        g = cut(m)
        out.setdefault(g, set()).update(cut(t) for t in targets if cut(t) != g)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    package_dir = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "prh_lib"
    files = module_names(package_dir)
    graph = import_graph(package_dir)
    for m, p in sorted(files.items(), key=lambda kv: len(kv[1].read_text().splitlines())):
        print(f"{len(p.read_text().splitlines()):6d}  {m}")
    print(f"{len(files)} modules, {sum(len(p.read_text().splitlines()) for p in files.values())} lines")
    print(f"{edge_count(graph)} intra-package import edges")
    found = cycles(graph)
    print(f"{len(found)} module-level import cycles" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
    groups = cycles(group_graph(graph))
    print(f"{len(groups)} group-level import cycles" + "".join(f"\n  {' <-> '.join(c)}" for c in groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
