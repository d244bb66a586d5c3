"""Every file, folder and `essaflow.` module the repository's code and docs cite exists in the repository.

A citation is a path under one of the repository's top-level folders (`docs/algorithms.md`, `essaflow/data/`,
`tests/unit/config/test_config.py`, `bench/hard_task.py`, `configs/tiny.yaml`) or a top-level file (README.md,
Makefile), found in any tracked text file; a dotted `essaflow.storage.manifest` (optionally ending in a name the module
defines) must name a module of the package (`essaflow.run_id` with one part is an MLflow tag, not a module). Paths
with placeholders or globs (`runs/<run_id>/`, `configs/essa-*.yaml`) are not citations.
"""

from __future__ import annotations

import ast
import re
import struct
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("bench", "cli", "configs", "devstack", "docs", "essaflow", "flows", "infra", "tasks", "tests")
TOP_FILES = ("README.md", "Makefile", "prefect.yaml", "pyproject.toml")
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".sh", ".js", ".json", ".ini", ""}
#: a path under a top-level folder: letters, digits, _ . - and /, ending in a file name or a folder's slash
PATH = re.compile(rf"(?<![\w./-])(?:{'|'.join(ROOTS)})/[\w./-]*")
DOTTED = re.compile(r"(?<![\w.])essaflow(?:\.[A-Za-z_]\w*){2,}")
#: files whose text is not the project's own (vendored, generated, model weights), and this file's counter-examples
SKIP = ("tests/e2e/browser/package-lock.json", "essaflow/assets/", "tests/unit/test_references.py")
#: a path followed by one of these is a pattern (a glob, a placeholder, a shell variable), not a file
GLOB = {"*", "<", "{", "$"}
#: cited paths that are made where the project is used, never committed
MADE_BY_USER = {"infra/.env"}  # the stack's credentials (infra/README.md), git-ignored


def index_names(repo: Path) -> list[str]:
    """The paths in git's index, what `git ls-files` lists, read from the index file (versions 2 to 4, SHA-1 names)
    instead of asking git: a unit test starts no process. ValueError or OSError where there is no such index."""
    git = repo / ".git"
    if git.is_file():  # a worktree or submodule: "gitdir: <path>"
        git = (repo / git.read_text().removeprefix("gitdir:").strip()).resolve()
    data = (git / "index").read_bytes()
    signature, version, count = struct.unpack(">4sLL", data[:12])
    if signature != b"DIRC" or version not in (2, 3, 4):
        raise ValueError(f"not a git index of version 2 to 4: {signature!r} {version}")
    names, pos, name = [], 12, b""
    for _ in range(count):  # an entry: 40 bytes of stat data, the 20-byte object name, 2 bytes of flags, the path
        (flags,) = struct.unpack(">H", data[pos + 60 : pos + 62])
        start = pos + 62 + (2 if version >= 3 and flags & 0x4000 else 0)  # extended flags
        if version == 4:  # the path: bytes dropped from the previous one (git's offset varint), then a suffix
            byte, start = data[start], start + 1
            drop = byte & 127
            while byte & 128:
                byte, start = data[start], start + 1
                drop = ((drop + 1) << 7) | (byte & 127)
            end = data.index(b"\0", start)
            name, pos = name[: len(name) - drop] + data[start:end], end + 1
        else:  # the whole path, padded with 1 to 8 NULs to a multiple of 8 bytes
            end = data.index(b"\0", start)
            name, pos = data[start:end], pos + (end - pos + 8) // 8 * 8
        names.append(name.decode())
    return sorted(set(names))  # a path in a merge conflict has an entry per stage


def tracked_files() -> list[Path]:
    try:
        names = index_names(REPO)
    except (OSError, ValueError, struct.error, IndexError):  # not a git checkout: every file but the virtual env's
        names = [
            str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file() and not {".venv", ".git"} & set(p.parts)
        ]
    return [REPO / n for n in names if not n.startswith(SKIP) and Path(n).suffix in TEXT and (REPO / n).is_file()]


def cited_paths(text: str) -> set[str]:
    found = {m.group(0).rstrip(".-") for m in PATH.finditer(text) if text[m.end() : m.end() + 1] not in GLOB}
    found |= {f for f in TOP_FILES if re.search(rf"(?<![\w/.-]){re.escape(f)}(?![\w-])", text)}
    return found


@cache
def _module_names(path: Path) -> frozenset[str]:
    """The names a module defines at its top level (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def dotted_exists(dotted: str) -> bool:
    """`essaflow.a.b` is a module or package, or `essaflow.a.name` a name module `essaflow.a` defines."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            rest = parts[cut:]
            return not rest or rest[0] in _module_names(module) or (base.is_dir() and (base / rest[0]).exists())
    return False


def test_every_cited_file_exists():
    missing = []
    for path in tracked_files():
        text = path.read_text(errors="replace")
        for cited in sorted(cited_paths(text) - MADE_BY_USER):
            if not (REPO / cited).exists():
                missing.append(f"{path.relative_to(REPO)}: {cited}")
        for dotted in sorted({m.group(0) for m in DOTTED.finditer(text)}):
            if not dotted_exists(dotted):
                missing.append(f"{path.relative_to(REPO)}: {dotted}")
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_the_checker_finds_a_missing_citation(tmp_path):
    assert cited_paths("configs/essa-*.yaml, runs/<id>/, tests/{a,b}.py") == set()
    assert cited_paths("see docs/algorithms.md sec. 2, and essaflow/data/ or bench/nope.py.") == {
        "docs/algorithms.md",
        "essaflow/data/",
        "bench/nope.py",
    }
    assert not (REPO / "bench/nope.py").exists()
    assert dotted_exists("essaflow.model.identity.model_identity") and dotted_exists("essaflow.storage")
    assert not dotted_exists("essaflow.model.loading.no_such_name") and not dotted_exists("essaflow.nowhere.x")


# ------------------------------------------------------------------------------------ the README's map of the tree

FILE_NAME = re.compile(r"(?<![\w./-])[\w-]+\.(?:py|md|yaml)(?![\w-])")


def readme_map() -> dict[str, str]:
    """The fenced tree under README.md's "How the pieces fit": each entry's path (a top-level name, or a package of
    essaflow/ indented by two) -> its description (continuation lines joined)."""
    text = (REPO / "README.md").read_text()
    block = text.split("## How the pieces fit", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        if not line.startswith(" "):
            current, _, rest = line.partition(" ")
        elif line.startswith("  ") and line[2] != " ":
            name, _, rest = line.strip().partition(" ")
            current = f"essaflow/{name}"
        else:
            rest = line
        entries[current] = f"{entries.get(current, '')} {rest.strip()}".strip()
    return entries


def root_modules(description: str) -> list[str]:
    """The modules the essaflow/ entry lists after "its root:" (parenthesised notes dropped)."""
    listed = re.sub(r"\([^)]*\)", "", description.split("its root:", 1)[1].split(".", 1)[0])
    return [word.strip() for word in listed.split(",")]


def test_every_path_the_readme_map_names_exists():
    entries = readme_map()
    assert len(entries) > 20, entries  # the parse found the tree
    missing = []
    for entry, description in entries.items():
        where = REPO / entry.rstrip("/")
        if not where.exists():
            missing.append(entry)
            continue
        for name in FILE_NAME.findall(description):  # a file the entry names: in that folder or below it
            if not (where / name).exists() and not any(where.rglob(name)):
                missing.append(f"{entry}: {name}")
    missing += [
        f"essaflow/: {m}.py" for m in root_modules(entries["essaflow/"]) if not (REPO / f"essaflow/{m}.py").exists()
    ]
    assert not missing, "README.md's map names what the tree does not hold:\n" + "\n".join(missing)


def test_the_readme_names_every_package_root_module_folder_doc_and_bench():
    entries = readme_map()
    readme = (REPO / "README.md").read_text()
    packages = {f"essaflow/{p.parent.name}/" for p in (REPO / "essaflow").glob("*/__init__.py")}
    folders = {f.relative_to(REPO).parts[0] + "/" for f in tracked_files() if len(f.relative_to(REPO).parts) > 1}
    folders = {f for f in folders if not f.startswith(".")}
    modules = {p.stem for p in (REPO / "essaflow").glob("*.py") if p.stem != "__init__"}
    docs = {p.name for p in (REPO / "docs").glob("*.md")}
    benches = {f"bench/{p.name}" for p in (REPO / "bench").glob("*.py")}
    bench_list = (REPO / "docs" / "development.md").read_text()
    unnamed = sorted(packages - set(entries)) + sorted(folders - set(entries))
    unnamed += sorted(f"essaflow/{m}.py" for m in modules - set(root_modules(entries["essaflow/"])))
    unnamed += sorted(f"docs/{d}" for d in docs - set(FILE_NAME.findall(entries["docs/"])))
    unnamed += sorted(b for b in benches if b not in bench_list)
    unnamed += sorted(f"tests/{t.name}/" for t in (REPO / "tests").iterdir() if t.is_dir() and t.name[0] not in "._"
                      and t.name not in entries["tests/"])  # fmt: skip
    commands = set(re.findall(r'app\.command\("([\w-]+)"\)', (REPO / "cli" / "main.py").read_text()))
    commands |= {
        m.split(".")[-1] for m in re.findall(r"app\.command\(\)\(([\w.]+)\)", (REPO / "cli/main.py").read_text())
    }
    commands |= set(re.findall(r'add_typer\([^)]*name="([\w-]+)"', (REPO / "cli" / "main.py").read_text()))
    assert {"demo", "eval", "stack", "compare-table"} <= commands, commands  # the parse found the commands
    unnamed += sorted(f"essaflow {c}" for c in commands if not re.search(rf"(?<![\w-]){c}(?![\w-])", entries["cli/"]))
    unnamed += sorted(f"essaflow {c} (the Commands table)" for c in commands if f"`essaflow {c}" not in readme)
    assert not unnamed, (
        "in the tree but not in README.md's map (or docs/development.md's list of benches):\n" + "\n".join(unnamed)
    )


def test_the_readme_stays_short():
    """What it is, the two commands, a picture, the results' pointers, the commands, the map and links: measured
    figures live in docs/results.md with their date, CPU and load, the how-to in docs/guide.md."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    assert lines[2:6] == ["```bash", lines[3], lines[4], "```"] and lines[3].startswith("make demo")
    assert lines[4].startswith("make test")
