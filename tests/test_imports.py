"""The import graph of the project's packages has no cycle.

Built with `ast` from the source, top-level and function-level imports alike, so a
lazy import inside a function cannot hide a circle.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sweeper", "trainables", "search_spaces", "benchmarks")


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(p): p for pkg in PACKAGES if (ROOT / pkg).is_dir()
            for p in sorted((ROOT / pkg).rglob("*.py"))}


def _resolve(name, modules):
    """The project module an import of `name` loads, or None for outside modules."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph():
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found = [_resolve(a.name, modules) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                # `from pkg import mod` imports the submodule pkg.mod
                found = [_resolve(f"{base}.{a.name}", modules) for a in node.names]
            else:
                continue
            targets.update(t for t in found if t and t != name)
        graph[name] = targets
    return graph


def find_cycle(graph):
    """One cycle as a list of modules [a, b, ..., a], or None."""
    state = {}  # 1 = on the stack, 2 = done

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, stack)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_graph_sees_top_and_function_level_imports():
    graph = import_graph()
    assert "trainables.config" in graph["trainables.trainer"]  # at the top
    assert "sweeper.report" in graph["sweeper.run"]  # inside main
    assert "trainables.classical" in graph["trainables.trainer"]  # inside train


def test_no_import_cycle():
    graph = import_graph()
    cycles = []
    while (cycle := find_cycle(graph)) is not None:
        cycles.append(" -> ".join(cycle))
        graph[cycle[0]] = graph[cycle[0]] - {cycle[1]}  # cut it to find the others
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_imports_a_private_name_of_another():
    """A name used across modules is public: no `from x import _name` (tests included)."""
    project = {m.split(".")[0] for m in _modules()} | {p.stem for p in (ROOT / "tests").glob("*.py")}
    found = []
    for path in sorted([*_modules().values(), *(ROOT / "tests").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in project:
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{a.name}"
                          for a in node.names if a.name.startswith("_")]
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def _imports_torch(path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(n.split(".")[0] == "torch" for n in names):
            return True
    return False


def test_the_driver_and_results_code_reach_no_module_that_imports_torch():
    """sweeper/ reads results without torch (docs/ARCHITECTURE.md): no import path, top-level or inside a
    function, leads from a sweeper module to a project module that imports torch. sweeper.tuner is the
    exception: it names the trainable (trainables.tune, which imports torch in the trial's process), and
    sweeper.run, which builds its Tuner there, with it."""
    modules, graph = _modules(), import_graph()
    torch_users = {m for m, p in modules.items() if _imports_torch(p)}
    assert "trainables.trainer" in torch_users and "sweeper.plots" not in torch_users
    found = []
    for start in sorted(m for m in modules if m.startswith("sweeper.") and m not in ("sweeper.run", "sweeper.tuner")):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        found += [f"{start} -> {m}" for m in sorted(seen & torch_users)]
    assert not found, "\n".join(found)


def test_storage_is_below_the_results_code():
    """sweeper/storage.py has its own error (StorageError) and imports no results module: the report code
    builds on storage, never the other way."""
    graph = import_graph()
    assert not {m for m in graph["sweeper.storage"] if m.startswith("sweeper.")}, graph["sweeper.storage"]
