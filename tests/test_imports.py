"""The import graph of the project's packages has no cycle, and sweeper/'s sub-packages keep their
rules: analysis/ imports no Ray, no installed module imports the study (study/, the repository's record
of itself, which `pip install` leaves out), and at most 12 modules sit directly in sweeper/.

Built with `ast` from the source, top-level and function-level imports alike, so a
lazy import inside a function cannot hide a circle.

    pytest tests/test_imports.py -q
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sweeper", "trainables", "search_spaces", "benchmarks", "study")
SERVICE = ("sweeper", "trainables", "search_spaces")  # what `pip install` installs (pyproject.toml)


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


@pytest.mark.slow
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
    function, leads from a sweeper module to a project module that imports torch. sweeper.driver.tuner is the
    exception: it names the trainable (trainables.tune, which imports torch in the trial's process), and
    sweeper.run, which builds its Tuner there, with it."""
    modules, graph = _modules(), import_graph()
    torch_users = {m for m, p in modules.items() if _imports_torch(p)}
    assert "trainables.trainer" in torch_users and "sweeper.analysis.plots" not in torch_users
    found = []
    for start in sorted(m for m in modules if m.startswith("sweeper.") and m not in ("sweeper.run", "sweeper.driver.tuner")):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        found += [f"{start} -> {m}" for m in sorted(seen & torch_users)]
    assert not found, "\n".join(found)


@pytest.mark.slow
def test_storage_is_below_the_results_code():
    """sweeper/storage.py has its own error (StorageError) and imports no results module: the report code
    builds on storage, never the other way."""
    graph = import_graph()
    assert not {m for m in graph["sweeper.storage"] if m.startswith("sweeper.")}, graph["sweeper.storage"]


# ---------------------------------------------------------------- sweeper/ by concern

SWEEPER = ROOT / "sweeper"
COMMANDS = ("run", "report", "list", "check_cluster")  # what a user types: python -m sweeper.X
MOST_TOP_LEVEL = 12  # modules directly in sweeper/, __init__.py included


def _sweeper_imports(path) -> set[str]:
    """The sweeper modules a file imports (top level or inside a function), by dotted name."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("sweeper.")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sweeper":
            # `from sweeper.pkg import module` imports that module; `from sweeper.pkg.module import name` the module
            out |= {f"{node.module}.{a.name}" if SWEEPER.joinpath(*node.module.split(".")[1:], f"{a.name}.py").is_file()
                    else node.module for a in node.names}
    return out


def _imports_ray(path) -> list[int]:
    """Line numbers of the file's imports of ray, top level or inside a function."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names)
            or isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ray"]


def test_sweeper_keeps_the_commands_on_top_and_the_rest_in_sub_packages():
    top = sorted(p.stem for p in SWEEPER.glob("*.py"))
    assert set(COMMANDS) <= set(top), top
    assert len(top) <= MOST_TOP_LEVEL, f"{len(top)} modules directly in sweeper/: {top}"
    for pkg in ("driver", "seeds", "analysis"):
        assert (SWEEPER / pkg / "__init__.py").is_file() and len(list((SWEEPER / pkg).glob("*.py"))) > 2, pkg


def test_the_checks_see_what_they_look_for():
    """The helpers below find a lazy ray import and a `from sweeper.pkg import module` (planted cases)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        planted = Path(tmp) / "m.py"
        planted.write_text("import os\n\ndef f():\n    from ray import tune\n    from sweeper.driver import live\n"
                           "    from sweeper import storage\n    import sweeper.analysis.html\n")
        assert _imports_ray(planted) == [4]
        assert _sweeper_imports(planted) == {"sweeper.driver.live", "sweeper.storage", "sweeper.analysis.html"}


def test_the_analysis_package_has_no_ray_import():
    """sweeper/analysis/ (tables, plots, report.html of a results folder) imports ray nowhere, not even
    inside a function, and builds on nothing above it: its sweeper imports are its own modules and
    sweeper.storage (whose Ray imports sit inside the driver's functions)."""
    found = []
    for path in sorted((SWEEPER / "analysis").glob("*.py")):
        found += [f"{path.relative_to(ROOT)}:{n}: imports ray" for n in _imports_ray(path)]
        found += [f"{path.relative_to(ROOT)}: imports {m}" for m in sorted(_sweeper_imports(path))
                  if not (m.startswith("sweeper.analysis.") or m == "sweeper.storage")]
    assert not found, "\n".join(found)


@pytest.mark.slow
def test_importing_every_analysis_module_loads_no_ray():
    """Each module of sweeper/analysis/ imported in a fresh interpreter: Ray is not in sys.modules after
    all of them (an import only adds modules, so none of them loads it on its own either)."""
    import subprocess
    import sys

    names = [f"sweeper.analysis.{p.stem}" for p in sorted((SWEEPER / "analysis").glob("*.py")) if p.stem != "__init__"]
    code = (f"import importlib, sys\nfor m in {names!r}:\n    importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout[-2000:]
    assert len(names) >= 10  # aggregate … paper_results: the whole results pipeline was imported


def test_no_installed_module_imports_the_study_and_pip_installs_no_study():
    """study/ (the generated docs, the claims, the committed-run index, the price tables' generator) is
    outside the service: no module of sweeper/, trainables/ or search_spaces/ reaches it, directly or through
    another, and pyproject.toml's package list leaves it out."""
    import fnmatch
    import tomllib

    graph = import_graph()
    found = []
    for start in sorted(m for m in graph if m.split(".")[0] in SERVICE):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        found += [f"{start} -> {m}" for m in sorted(seen) if m.split(".")[0] == "study"]
    assert not found, "\n".join(found)
    assert any(m.startswith("study.") for m in graph["study.docs"])  # the check sees such an arrow
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(fnmatch.fnmatch(name, pat) for pat in include for name in ("study", "study.docs"))
    assert all(any(fnmatch.fnmatch(pkg, pat) for pat in include) for pkg in SERVICE)


@pytest.mark.slow  # a Python that imports Ray, twice
@pytest.mark.parametrize("enabled, imported", [("0", False), ("1", True)])
def test_a_driver_without_usage_statistics_imports_no_tracker_to_count_its_callbacks(enabled, imported):
    """Tune's usage tag of a run's callbacks imports every tracker integration (MLflow among them) to test
    their classes; with usage statistics off sweeper.driver.tuner skips it, with them on Ray's own runs."""
    pytest.importorskip("mlflow")
    code = ("import os, sys; os.environ['RAY_USAGE_STATS_ENABLED'] = sys.argv[1]\n"
            "from ray import tune\nfrom ray.air._internal import usage\n"
            "from sweeper.driver.tuner import skip_callback_usage_tag\n"
            "skip_callback_usage_tag(); usage.tag_callbacks([tune.Callback()]); print('mlflow' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code, enabled], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split()[-1] == str(imported), p.stdout + p.stderr[-2000:]
