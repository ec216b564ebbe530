"""The import graph of a package, read with ``ast``, and its cycles.

    python tools/import_cycles.py [PACKAGE_DIR]      (default: mhalearn)

Every module of the package is a node; ``import a.b`` and ``from a.b import
c`` inside it give an edge to ``a.b`` (or to the submodule ``a.b.c`` when
``c`` is one), relative imports resolved against the module's package, at
any depth (imports inside functions count too).  Only edges between the
package's own modules are kept.  A module is not made to depend on its
parent packages by being imported: that is Python's loading order, not a
dependency the code states.  The strongly connected components with more than
one module (or a module importing itself) are the cycles.

It also refuses a two-way tie between the package's top-level folders
(its subpackages, ``mhalearn.data`` and ``mhalearn.attention``): when a
module of one imports a module of the other and the other way round, the
two folders are one floor in fact, whatever their names say.  The script
prints each cycle and tie and exits 1, or prints "no cycles, no ties" and
exits 0.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` file under the package directory ``root``."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module ``name`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in modules and target != "")
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def import_cycles(root: Path) -> list[list[str]]:
    """The cycles of the package's import graph (empty when there are none)."""
    modules = module_names(root)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    return [component for component in strongly_connected(graph)
            if len(component) > 1 or component[0] in graph[component[0]]]


def folder_of(name: str, root: Path) -> str | None:
    """The top-level folder (subpackage) of the package that module ``name`` lies in, None for a module at
    the package's top level (``mhalearn._validation``) or the package itself."""
    parts = name.split(".")
    if len(parts) < 2 or not (root / parts[1]).is_dir():
        return None
    return f"{parts[0]}.{parts[1]}"


def folder_ties(root: Path) -> list[tuple[str, str, tuple[str, str], tuple[str, str]]]:
    """The pairs of top-level folders that import each other: (folder, other, an import from folder into
    other, an import back), each pair once, in order."""
    modules = module_names(root)
    crossing: dict[tuple[str, str], tuple[str, str]] = {}
    for name, path in modules.items():
        source = folder_of(name, root)
        for target in sorted(imports_of(name, path, modules)):
            destination = folder_of(target, root)
            if source is not None and destination is not None and source != destination:
                crossing.setdefault((source, destination), (name, target))
    return [(first, second, crossing[first, second], crossing[second, first])
            for first, second in sorted(crossing) if first < second and (second, first) in crossing]


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parent.parent / "mhalearn")
    cycles, ties = import_cycles(root), folder_ties(root)
    for cycle in cycles:
        print("cycle: " + " <-> ".join(cycle))
    for first, second, forward, back in ties:
        print(f"tie: {first} <-> {second} ({forward[0]} imports {forward[1]}; {back[0]} imports {back[1]})")
    if cycles or ties:
        print(f"{len(cycles)} cycles, {len(ties)} ties between folders")
        return 1
    print(f"no cycles, no ties ({len(module_names(root))} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
