"""The layering rule, read statically from the source: flows -> tasks -> essaflow, with cli/ and devstack/ on top.

Every import counts, at any depth (module level, inside functions, under TYPE_CHECKING), read with `ast` from each
.py file of essaflow/, tasks/, flows/, cli/ and devstack/; relative imports are resolved against the importing module.

How an import becomes an edge. Python runs a package's ``__init__`` before any of its submodules, but the importer
does not depend on what that ``__init__`` defines; counting it would make every package whose ``__init__`` re-exports
its submodules a cycle with each submodule importing a sibling. So ``import a.b.c`` and ``from a.b.c import name``
are an edge to the module ``a.b.c`` only. ``from a.b import c`` names the package: it is an edge to ``a.b`` (the
names are looked up on it, so a partly run ``__init__`` fails the import) and also to ``a.b.c`` when ``c`` is a
module. A submodule that imports its siblings through its own package (``from essaflow.data import countdown``)
while the package's ``__init__`` imports that submodule is a cycle.

Cycles are looked for twice in essaflow/: between modules, and between its parts, a part being a top-level module
(``essaflow.config``) or a whole subpackage (``essaflow.grpo``), so that a subpackage is one layer: config importing
grpo.losses while grpo.loop imports config is a cycle of parts, not of modules. A cycle reads "a -> b -> a".

One edge is left out of the parts graph by design: the pipeline config composing a subpackage's own config module
(``essaflow.config -> essaflow.grpo.config``). Each stage's config lives beside its code and ``essaflow.config`` only
assembles them (the table at the top of essaflow/config.py), while the trainers read the assembled config; what
the parts check still forbids is config.py reaching into a subpackage's code (a validator in config.py looking up
grpo's loss registry, say).
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("essaflow", "tasks", "flows", "cli", "devstack")
ABOVE = {"flows": {"cli", "devstack"}, "tasks": {"flows", "cli", "devstack"}}
FORBIDDEN = {**ABOVE, "essaflow": {"prefect", "tasks", *ABOVE["tasks"]}}  # what each layer must never import


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


MODULES = {module_name(p): p for layer in LAYERS for p in sorted((REPO / layer).rglob("*.py"))}


def imports_in(source: str, module: str, is_package: bool = False) -> set[str]:
    """What ``module`` (``source`` is its file's text) imports anywhere in it, as edges by this file's rule."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x (level 1: this package), from .. import x (its parent), ...
                parent = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return found


GRAPH = {m: imports_in(p.read_text(), m, p.name == "__init__.py") for m, p in MODULES.items()}


def shortest_cycle_through(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """The shortest chain start -> ... -> start (breadth first), or None."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node]):
            if nxt == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(parent[chain[-1]])
                return [*reversed(chain), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return None


def is_composition(module: str, target: str) -> bool:
    """The pipeline config assembling a subpackage's config module (see the docstring: not a layering edge)."""
    return module == "essaflow.config" and target.count(".") == 2 and target.endswith(".config")


def library_cycles(part=lambda module: module, skip=lambda module, target: False) -> list[str]:
    """The distinct cycles between ``part(module)`` of essaflow/'s modules, each "a -> b -> a" from its least name."""
    graph: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        if module.split(".")[0] == "essaflow":
            inside = [t for t in targets if t in GRAPH and t.split(".")[0] == "essaflow" and not skip(module, t)]
            deps = {part(t) for t in inside}
            graph.setdefault(part(module), set()).update(deps - {part(module)})  # inside a part is no cycle
    cycles = set()
    for chain in filter(None, (shortest_cycle_through(name, graph) for name in graph)):
        ring, first = chain[:-1], chain.index(min(chain))
        ring = ring[first:] + ring[:first]
        cycles.add(" -> ".join([*ring, ring[0]]))
    return sorted(cycles)


def test_imports_become_edges_by_the_rule_lazy_and_relative_ones_included():
    source = "import essaflow.grpo.losses\nfrom essaflow import tracking, cluster\nfrom essaflow.data import Problem\n"
    source += "def f():\n    from . import advantages\n    from ..data import schema\n    from .losses import x\n"
    # the module an import names, and the package a `from` names (essaflow, essaflow.grpo), not the parents of a
    # dotted name (`import essaflow.grpo.losses` is no edge to essaflow.grpo); essaflow.data: Problem is defined there
    expected = {"grpo.losses", "tracking", "cluster", "data", "grpo", "grpo.advantages", "data.schema"}
    assert imports_in(source, "essaflow.grpo.loop") == {"essaflow", *(f"essaflow.{m}" for m in expected)}
    assert imports_in("from . import losses", "essaflow.grpo", is_package=True) == {
        "essaflow.grpo",
        "essaflow.grpo.losses",
    }
    assert {m.split(".")[0] for m in MODULES} == set(LAYERS)
    assert "flows.finetune" in GRAPH["cli.pipeline"]  # a lazy import inside a function of the real tree


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_never_imports_the_layers_above_it(layer):
    bad = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if module.split(".")[0] == layer
        for target in targets
        if target.split(".")[0] in FORBIDDEN[layer]
    )
    assert not bad, f"{layer}/ must not import {sorted(FORBIDDEN[layer])}:\n" + "\n".join(bad)


def test_a_submodule_importing_its_siblings_through_its_package_is_a_cycle():
    """The cycle data/synthetic_tasks.py once had: data/__init__ imports sources, sources imports synthetic_tasks,
    and synthetic_tasks took its siblings from the package (``from essaflow.data import countdown``)."""
    data, sources, tasks = "essaflow.data", "essaflow.data.sources", "essaflow.data.synthetic_tasks"
    graph = {
        data: imports_in("from essaflow.data.sources import load_problems", data, is_package=True),
        sources: imports_in("from essaflow.data.synthetic_tasks import task_problems", sources),
        tasks: imports_in("from essaflow.data import countdown", tasks),
        "essaflow.data.countdown": set(),
    }
    assert shortest_cycle_through(tasks, graph) == [tasks, data, sources, tasks]
    assert imports_in("from essaflow.data.countdown import ALPHABET", tasks) == {"essaflow.data.countdown"}  # no cycle


def test_no_import_cycle_between_modules_of_the_library():
    assert not (cycles := library_cycles()), "import cycles between modules of essaflow/:\n" + "\n".join(cycles)


def test_no_import_cycle_between_parts_of_the_library():
    cycles = library_cycles(part=lambda module: ".".join(module.split(".")[:2]), skip=is_composition)
    assert not cycles, "import cycles between parts (modules, subpackages) of essaflow/:\n" + "\n".join(cycles)


def test_the_library_root_holds_only_what_every_stage_shares():
    """The pipeline config and its base, the plug-in registry, refs, secrets, timing, the input check, the trainer
    interface and usage accounting: at most 12 modules; every stage's own code lives in the subpackage named for
    it."""
    root = sorted(p.stem for p in (REPO / "essaflow").glob("*.py"))
    assert len(root) <= 12, root


def test_the_cluster_package_knows_no_method():
    """essaflow/cluster/ checks what a run asks for against the cluster's capacity; what each method needs from the
    cluster its own config states. So no module of cluster/ imports a method's package (its config included) or the
    pipeline config that assembles the methods' configs."""
    methods = ("essaflow.essa", "essaflow.grpo")
    bad = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if module.startswith("essaflow.cluster")
        for target in targets
        if target == "essaflow.config" or target in methods or target.startswith(tuple(f"{m}." for m in methods))
    )
    assert [m for m in GRAPH if m.startswith("essaflow.cluster.")], "the cluster package was found"
    assert not bad, "cluster/ must know no method:\n" + "\n".join(bad)
