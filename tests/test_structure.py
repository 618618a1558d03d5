"""The shape of the package (docs/architecture.md): folders that name the parts, layers that import only
downwards, no import cycle (counting the imports made inside functions), the loop on its ports alone,
and Docker used only by the sandbox package. Read from the source with `ast`, so nothing is imported
and no engine is needed."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "orchestrator"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The module's syntax tree, read once per session: every test here walks the whole package."""
    return ast.parse(path.read_text(), str(path))


def imported_names(path: Path, name: str, known: frozenset[str] = frozenset()) -> set[str]:
    """Every module named by an import anywhere in the file (top level, in functions, under TYPE_CHECKING
    alike). `from a import b` names `a.b` when that is a module of the package (a submodule import, as
    import-cycle checkers count it) and `a` otherwise, since then b is a name defined by a."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the orchestrator modules it imports. Importing `a.b.c` runs `a` and `a.b` too, but a
    package's __init__ is an edge only when it is named, so that a module importing a sibling is not
    said to import its own package."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = {target for target in imported_names(path, name, frozenset(known))
                   if target in known and target != name}
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_is_read_from_every_module() -> None:
    graph = import_graph()
    assert "orchestrator.agent.loop" in graph and "orchestrator.sandbox.docker.container" in graph
    assert graph["orchestrator.agent.loop"], "the loop imports other modules of the package"


def test_the_cycle_finder_names_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_inside_orchestrator() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# The layers, lowest first. A module may import its own layer and the ones below, never one above: the
# parts a run is made of know nothing of what drives them, so each can be read, tested and replaced alone.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("orchestrator.errors", "orchestrator.status", "orchestrator.config", "orchestrator.events",
              "orchestrator.sizes", "orchestrator.version")),
    ("pure parts", ("orchestrator.llm", "orchestrator.context")),
    ("ports", ("orchestrator.ports",)),
    ("parts with I/O", ("orchestrator.store", "orchestrator.sandbox", "orchestrator.tools")),
    ("the run's view", ("orchestrator.view",)),
    ("agent", ("orchestrator.agent",)),
    ("runs", ("orchestrator.runs", "orchestrator.testing")),
    ("ui", ("orchestrator.ui",)),
    ("drivers", ("orchestrator.batch", "orchestrator.integrations")),
    ("entry points", ("orchestrator.cli", "orchestrator.api", "orchestrator.harbor", "orchestrator")),
]


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix that names `module` (every module has one)."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def test_the_layer_rule_finds_an_import_that_runs_back_up() -> None:
    assert layer_of("orchestrator.store.run_dir") < layer_of("orchestrator.agent.loop") < layer_of("orchestrator.cli")
    assert layer_of("orchestrator.errors") == 0 and layer_of("orchestrator") == len(LAYERS) - 1


def test_no_module_imports_a_higher_layer() -> None:
    upward = sorted(
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, targets in import_graph().items() for target in targets
        if layer_of(target) > layer_of(name)
    )
    assert upward == [], upward


def test_at_most_ten_modules_sit_at_the_top_of_the_package() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top


def test_the_loop_imports_nothing_of_the_store_the_sandbox_docker_or_litellm() -> None:
    """The loop sees only its ports (orchestrator/ports.py): the run directory, the engine and the model
    library are plugged in by the composition root, so the loop runs on in-memory ones (orchestrator/testing)."""
    path = PACKAGE / "agent" / "loop.py"
    names = imported_names(path, "orchestrator.agent.loop", frozenset(modules()))
    forbidden = ("orchestrator.store", "orchestrator.sandbox", "orchestrator.runs", "docker", "litellm")
    assert sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden)) == []


def test_only_the_docker_backend_imports_docker() -> None:
    offenders = sorted(
        name for name, path in modules().items()
        if not name.startswith("orchestrator.sandbox.docker")
        and any(target == "docker" or target.startswith("docker.") for target in imported_names(path, name))
    )
    assert offenders == [], f"modules outside orchestrator/sandbox/docker/ importing docker: {offenders}"


BACKENDS = ("orchestrator.sandbox.docker", "orchestrator.sandbox.harbor", "orchestrator.sandbox.local")


def test_a_sandbox_backend_imports_no_other_backend() -> None:
    """Each backend has a home of its own and shares only the backend-neutral modules of sandbox/."""
    known = frozenset(modules())
    offenders = sorted(
        f"{name} imports {target}" for name, path in modules().items()
        for home in BACKENDS if name == home or name.startswith(home + ".")
        for target in imported_names(path, name, known)
        if any(target == other or target.startswith(other + ".") for other in BACKENDS if other != home)
    )
    assert offenders == [], offenders


def test_every_backend_folder_is_registered() -> None:
    from orchestrator.sandbox.backends import BACKENDS as registered

    folders = {path.name for path in (PACKAGE / "sandbox").iterdir() if (path / "__init__.py").is_file()}
    assert folders == set(registered)
    assert {spec.partition(":")[0].rpartition(".")[0] for spec in registered.values()} == set(BACKENDS)


def test_the_backend_neutral_sandbox_modules_import_no_backend() -> None:
    known = frozenset(modules())
    neutral = [name for name in modules() if name.startswith("orchestrator.sandbox")
               and not any(name == home or name.startswith(home + ".") for home in BACKENDS)]
    assert "orchestrator.sandbox.calls" in neutral
    offenders = sorted(f"{name} imports {target}" for name in neutral
                       for target in imported_names(modules()[name], name, known)
                       if any(target == home or target.startswith(home + ".") for home in BACKENDS)
                       or target in ("docker", "litellm") or target.startswith(("docker.", "litellm.")))
    assert offenders == [], offenders


def test_importing_the_testing_ports_loads_neither_docker_nor_litellm() -> None:
    """orchestrator.testing is documented as needing no Docker and no model service: it must not even load
    their libraries (a fresh interpreter, so nothing another test imported counts)."""
    import subprocess
    import sys

    probe = ("import sys, orchestrator.testing; "
             "print(sorted(m for m in ('docker', 'litellm') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_ports_say_what_they_take_without_any() -> None:
    """ports.py names every type it means: no `Any` (ruled out even as a name imported from typing)."""
    tree = parsed(PACKAGE / "ports.py")
    anys = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == "Any"]
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "typing"
                for alias in node.names]
    assert anys == [] and "Any" not in imported, f"Any in orchestrator/ports.py at lines {anys}"


def test_no_function_takes_an_agent_or_a_parent_typed_any() -> None:
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                offenders += [f"{name}:{node.lineno} {arg.arg}" for arg in args
                              if arg.arg in ("agent", "parent") and isinstance(arg.annotation, ast.Name)
                              and arg.annotation.id == "Any"]
    assert offenders == [], offenders


# The core and the tools reach the sandbox only through orchestrator/ports.py (issue 12): a second
# backend, or a test's fake, is then one new class. (tools/mcp_packages, the uvx rule, asks
# sandbox/docker/derived.py for its image when a run is put together, before any tool runs.)
THROUGH_PORTS = ("orchestrator.agent.loop", "orchestrator.ports", "orchestrator.agent.delegate", "orchestrator.agent.guards",
                 "orchestrator.context", "orchestrator.tools.registry", "orchestrator.tools.outcome",
                 "orchestrator.tools.builtin", "orchestrator.tools.mcp", "orchestrator.tools.mcp_transport")


def test_the_loop_and_the_tools_import_nothing_of_the_sandbox_package() -> None:
    known = frozenset(modules())
    offenders = sorted(
        f"{name} imports {target}" for name, path in modules().items()
        if any(name == part or name.startswith(part + ".") for part in THROUGH_PORTS)
        for target in imported_names(path, name, known)
        if target == "orchestrator.sandbox" or target.startswith("orchestrator.sandbox.")
    )
    assert offenders == [], offenders


def test_only_the_sandbox_package_touches_the_engine_objects() -> None:
    """No `<x>.client.api` (docker-py's low-level client) and no `<x>.container.id` outside sandbox/docker/."""
    offenders = []
    for name, path in modules().items():
        if name.startswith("orchestrator.sandbox.docker"):
            continue
        for node in ast.walk(parsed(path)):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and (node.value.attr, node.attr) in (("client", "api"), ("container", "id"))):
                offenders.append(f"{name}:{node.lineno} .{node.value.attr}.{node.attr}")
    assert offenders == [], offenders
