"""The package's import contract, read from the source with ``ast`` (nothing is imported):

- no import cycle among kstate's modules, counting every import: module level, in functions and
  under ``TYPE_CHECKING``;
- no private name (``_x``) taken from another module, by ``from m import _x`` or ``m._x``;
- kstate.spark in layers, each folder importing only the folders below it (``SPARK_LAYERS``);
  the modules outside kstate.spark import none of it (but the ``kstate`` command and
  ``kstate.serving``, lazily); ``format``, ``protocol`` and ``serving`` load no PySpark when
  imported;
- an import inside a function only where it defers a heavy dependency (the native library,
  PySpark, Arrow, pandas) that the importing module does not load already, or one of
  ``DEFERRED``.

``test_the_contract_catches_violations`` runs the same checks over a small package with one
violation of each kind."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SOURCE_DIR = Path(__file__).resolve().parents[2] / "python" / "kstate"
# The source tree's package, or where there is none (tests copied beside an installed wheel,
# as scripts/check-debian11.sh runs them) the installed one; found, not imported.
PACKAGE_DIR = SOURCE_DIR if SOURCE_DIR.is_dir() else Path(importlib.util.find_spec("kstate").origin).parent

SPARK_LAYERS = ("format", "protocol", "routing", "engine", "processor", "read", "serving")
"""kstate.spark's folders, lowest first: each may import the ones before it and itself. The
modules at kstate.spark's top (the package itself, ``testing``, ``rescale``) are the public entry
points over all of them; nothing below imports them."""

NO_PYSPARK_ON_IMPORT = ("format", "protocol", "serving")
HEAVY = ("kstate._core", "pyspark", "pyarrow", "pandas", "numpy", "fsspec")
DEFERRED = (
    "kstate.log.remote",
    "kstate.log.storage_process",
    "kstate.log.snapshots",
    "kstate.log.snapshot_writer",
    "kstate.log.history",
)
"""kstate modules a function may import to defer them: the object-store side (fsspec, HTTP, TLS,
the storage process), which a store without a remote changelog never loads, and snapshots (with ``kstate.log``), which a
store without them never loads (``test_first_use.py``)."""
ENTRY_INTO_SPARK = ("cli", "serving")
"""Modules outside kstate.spark allowed to import it (function-level, as the CLI loads it lazily;
``kstate.serving`` is the public name of ``kstate.spark.serving``'s replica)."""


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the module imported (a kstate module, or a third-party top name)
    name: str | None  # the name taken from ``target``, or None for the module itself
    line: int
    in_function: bool
    type_checking: bool


@dataclass
class Package:
    modules: dict[str, Path] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)
    imports: list[Import] = field(default_factory=list)
    private_attributes: list[tuple[str, str, str, int]] = field(default_factory=list)

    def module_of(self, dotted: str) -> str | None:
        """The longest known module prefix of ``dotted``."""
        while dotted:
            if dotted in self.modules:
                return dotted
            dotted = dotted.rpartition(".")[0]
        return None


def read_package(root: Path, top: str) -> Package:
    package = Package()
    for path in sorted(root.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi") or (path.suffix == ".pyi" and path.with_suffix(".py").exists()):
            continue
        parts = [top, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
            package.packages.add(".".join(parts))
        package.modules[".".join(parts)] = path
    for module, path in package.modules.items():
        if path.suffix == ".py":
            _read_module(package, module, path, top)
    return package


def _read_module(package: Package, module: str, path: Path, top: str) -> None:
    tree = ast.parse(path.read_text(), str(path))
    here = module if module in package.packages else module.rpartition(".")[0]
    module_aliases: dict[str, str] = {}

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True, type_checking)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for inner in child.body:
                    visit_one(inner, in_function, True)
                for inner in child.orelse:
                    visit_one(inner, in_function, type_checking)
            else:
                visit_one(child, in_function, type_checking)

    def visit_one(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for found in _imports_of(package, module, here, node, in_function, type_checking):
                package.imports.append(found)
            for alias in node.names:  # names bound to a kstate module, for ``module._private``
                bound = alias.asname or (alias.name if isinstance(node, ast.ImportFrom) else None)
                target = package.module_of(
                    f"{node.module}.{alias.name}" if isinstance(node, ast.ImportFrom) else alias.name
                )
                if bound and target and target.endswith("." + alias.name.split(".")[-1]):
                    module_aliases[bound] = target
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = module_aliases.get(node.value.id)
            if target and target != module and _private(node.attr) and f"{target}.{node.attr}" not in package.modules:
                package.private_attributes.append((module, target, node.attr, node.lineno))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            visit(node, True, type_checking)
        else:
            visit(node, in_function, type_checking)

    visit(tree, False, False)


def _imports_of(
    package: Package, module: str, here: str, node: ast.Import | ast.ImportFrom, in_function: bool, type_checking: bool
) -> Iterator[Import]:
    def made(target: str, name: str | None) -> Import:
        return Import(module, target, name, node.lineno, in_function, type_checking)

    if isinstance(node, ast.Import):
        for alias in node.names:
            yield made(package.module_of(alias.name) or alias.name.split(".")[0], None)
        return
    if node.level:
        base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in package.modules:
            yield made(submodule, None)
        else:
            yield made(package.module_of(source) or source.split(".")[0], alias.name)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _internal(package: Package, imp: Import) -> bool:
    return imp.target in package.modules and imp.target != imp.importer


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def cycles(package: Package) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), every import counted."""
    edges: dict[str, set[str]] = {m: set() for m in package.modules}
    for imp in package.imports:
        if _internal(package, imp):
            edges[imp.importer].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for m in sorted(package.modules):
        if m not in index:
            connect(m)
    return found


def private_imports(package: Package) -> list[str]:
    taken = [
        f"{imp.importer}:{imp.line} takes {imp.target}.{imp.name}"
        for imp in package.imports
        if _internal(package, imp) and imp.name is not None and _private(imp.name)
    ]
    taken += [f"{m}:{line} takes {target}.{name}" for m, target, name, line in package.private_attributes]
    return taken


def layer_of(module: str, top: str) -> int | None:
    """A kstate.spark module's layer (its index in ``SPARK_LAYERS``; the entry points above them
    all), or None outside kstate.spark."""
    spark = f"{top}.spark"
    if module != spark and not module.startswith(spark + "."):
        return None
    folder = module[len(spark) + 1 :].split(".")[0]
    return SPARK_LAYERS.index(folder) if folder in SPARK_LAYERS else len(SPARK_LAYERS)


def layer_violations(package: Package, top: str) -> list[str]:
    found = []
    for imp in package.imports:
        if not _internal(package, imp):
            mine = layer_of(imp.importer, top)
            if imp.target == "pyspark" and mine is not None and mine < len(SPARK_LAYERS):
                if SPARK_LAYERS[mine] in NO_PYSPARK_ON_IMPORT and not imp.in_function and not imp.type_checking:
                    found.append(f"{imp.importer}:{imp.line} imports pyspark when imported")
            continue
        mine, theirs = layer_of(imp.importer, top), layer_of(imp.target, top)
        if theirs is None:
            continue
        if mine is None:
            if imp.importer not in {f"{top}.{m}" for m in ENTRY_INTO_SPARK}:
                found.append(f"{imp.importer}:{imp.line} (outside kstate.spark) imports {imp.target}")
        elif theirs > mine:
            found.append(f"{imp.importer}:{imp.line} imports {imp.target}, a layer above it")
    return found


def _heavy_on_import(package: Package) -> dict[str, set[str]]:
    """What importing each module loads of ``HEAVY`` (its module-level imports, transitively,
    with the packages around each module)."""
    direct: dict[str, set[str]] = {m: set() for m in package.modules}
    for imp in package.imports:
        if imp.in_function or imp.type_checking:
            continue
        for target in (*_parents(imp.target), imp.target):
            if target in package.modules or target in HEAVY or target.split(".")[0] in HEAVY:
                direct[imp.importer].add(target)
    for m in package.modules:
        direct[m].update(p for p in _parents(m) if p in package.modules)
    loaded: dict[str, set[str]] = {}
    for m in package.modules:
        seen: set[str] = set()
        todo = [m]
        while todo:
            for target in direct.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        loaded[m] = {t for t in seen if t in HEAVY or t.split(".")[0] in HEAVY}
    return loaded


def needless_function_imports(package: Package) -> list[str]:
    heavy = _heavy_on_import(package)
    return [
        f"{imp.importer}:{imp.line} imports {imp.target} in a function, which defers nothing heavy"
        for imp in package.imports
        if _internal(package, imp)
        and imp.in_function
        and imp.target not in DEFERRED
        and not heavy[imp.target] - heavy[imp.importer]
    ]


@pytest.fixture(scope="module")
def kstate_package() -> Package:
    package = read_package(PACKAGE_DIR, "kstate")
    assert "kstate.spark.processor" in package.packages, f"no kstate package read at {PACKAGE_DIR}"
    return package


def _listed(problems: list) -> str:
    return "\n" + "\n".join(map(str, problems))


def test_no_import_cycles(kstate_package):
    found = cycles(kstate_package)
    assert not found, _listed(found)


def test_no_private_names_across_modules(kstate_package):
    found = private_imports(kstate_package)
    assert not found, _listed(found)


def test_spark_layers(kstate_package):
    found = layer_violations(kstate_package, "kstate")
    assert not found, _listed(found)
    folders = {p.name for p in (PACKAGE_DIR / "spark").iterdir() if (p / "__init__.py").exists()}
    assert folders == set(SPARK_LAYERS), "a new folder in kstate.spark needs its place in SPARK_LAYERS"


def test_imports_in_functions_only_defer_heavy_dependencies(kstate_package):
    found = needless_function_imports(kstate_package)
    assert not found, _listed(found)


def test_the_contract_catches_violations(tmp_path):
    files = {
        "__init__.py": "",
        "_core.pyi": "",
        "light.py": "import kstate.ring_a\n",
        "ring_a.py": "def f():\n    from kstate import ring_b\n",
        "ring_b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kstate.ring_a import f\n",
        "owner.py": "from kstate import _core\n_secret = 1\n",
        "taker.py": "from kstate.owner import _secret\nfrom kstate import owner\nx = owner._secret\n",
        "outside.py": "from kstate.spark.format import codec\n",
        "lazy.py": "def f():\n    from kstate.owner import x\n    from kstate.light import y\n",
        "spark/__init__.py": "",
        "spark/format/__init__.py": "",
        "spark/format/codec.py": "import pyspark\nfrom kstate.spark.protocol import log\n",
        "spark/protocol/__init__.py": "",
        "spark/protocol/log.py": "from kstate.spark.format import codec\n",
    }
    for name in SPARK_LAYERS[2:]:
        files[f"spark/{name}/__init__.py"] = ""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    package = read_package(tmp_path, "kstate")
    assert cycles(package) == [
        ["kstate.ring_a", "kstate.ring_b"],
        ["kstate.spark.format.codec", "kstate.spark.protocol.log"],
    ]
    assert private_imports(package) == [
        "kstate.taker:1 takes kstate.owner._secret",
        "kstate.taker:3 takes kstate.owner._secret",
    ]
    assert sorted(layer_violations(package, "kstate")) == [
        "kstate.outside:1 (outside kstate.spark) imports kstate.spark.format.codec",
        "kstate.spark.format.codec:1 imports pyspark when imported",
        "kstate.spark.format.codec:2 imports kstate.spark.protocol.log, a layer above it",
    ]
    assert sorted(needless_function_imports(package)) == [
        "kstate.lazy:3 imports kstate.light in a function, which defers nothing heavy",
        "kstate.ring_a:2 imports kstate.ring_b in a function, which defers nothing heavy",
    ]
