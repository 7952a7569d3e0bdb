"""The package's import boundaries, checked on the source with ``ast`` (nothing imported).

Every ``import`` counts, at module level or inside a function (a lazy import is still a
dependency); imports under ``if TYPE_CHECKING:`` are for the type checker only and are
left out. ``docs/architecture.md`` explains each rule.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "dp_ops"
DEMO = "dp_demo"

# Third-party and standard-library roots the privacy kernel may import: no files, no
# engine, no Airflow, no dataframes.
KERNEL_THIRD_PARTY = frozenset({
    "__future__", "collections", "dataclasses", "datetime", "decimal", "enum", "functools",
    "hashlib", "hmac", "json", "math", "numbers", "uuid",
    "random",
    "secrets", "sqlite3", "time", "typing", "numpy", "randomgen", "sqlalchemy",
})
# The ledger's schema migrations (Alembic, a SQLAlchemy tool) find their own scripts next
# to their module: code, not data; nothing else of the kernel may use them.
KERNEL_MIGRATIONS = "dp_ops.privacy.ledger_migrations", "dp_ops.privacy.migrations"
KERNEL_MIGRATIONS_THIRD_PARTY = frozenset({"alembic", "pathlib"})
# The ledger key lives outside the data root and the database (an environment secret or a
# key file): the one place the kernel reads the environment and one small file.
KERNEL_KEY = ("dp_ops.privacy.ledger_key",)
KERNEL_KEY_THIRD_PARTY = frozenset({"os", "pathlib"})
# The code that runs SQL over private rows: the engines, and ingest (which validates the
# raw partitions).
ROW_READERS = ("dp_ops.engine", "dp_ops.steps.ingest")
ENGINE_LIBRARIES = ("duckdb", "pyspark")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module (or module.name for "from m import name")
    line: int


@dataclass(frozen=True)
class Violation:
    rule: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.where}: {self.detail}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, type_checking: bool = False) -> Iterator[ast.AST]:
    """Every node, except the bodies of ``if TYPE_CHECKING:`` blocks unless
    ``type_checking``."""
    for child in ast.iter_child_nodes(node):
        if not type_checking and isinstance(child, ast.If) and _type_checking_only(child):
            for other in child.orelse:
                yield other
                yield from _walk(other)
            continue
        yield child
        yield from _walk(child, type_checking)


def imports_of(root: Path, path: Path, type_checking: bool = False) -> list[Import]:
    """The imports of the module at ``path``; with ``type_checking``, those under
    ``if TYPE_CHECKING:`` too."""
    module = module_name(root, path)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []
    for node in _walk(tree, type_checking):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            found += [Import(module, f"{base}.{alias.name}" if alias.name != "*" else base,
                             node.lineno) for alias in node.names]
    return found


def all_imports(root: Path, packages: Iterable[str] = (PACKAGE, DEMO),
                type_checking: bool = False) -> list[Import]:
    out: list[Import] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            out += imports_of(root, path, type_checking)
    return out


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _resolve(target: str, modules: set[str]) -> str | None:
    """The project module ``target`` names (``pkg.mod.name`` -> ``pkg.mod``), if any."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def check(root: Path) -> list[Violation]:
    """Every boundary violation in the packages under ``root`` (``plugins/``)."""
    imports = all_imports(root)
    modules = {module_name(root, p) for pkg in (PACKAGE, DEMO)
               for p in (root / pkg).rglob("*.py")}
    out: list[Violation] = []
    for imp in imports:
        where = f"{imp.module}:{imp.line} imports {imp.target}"
        top = imp.target.split(".")[0]
        if _within(imp.module, PACKAGE) and top == DEMO:
            out.append(Violation("dp_ops never imports dp_demo", where, ""))
        if top == "airflow" and not _within(imp.module, f"{PACKAGE}.airflow") \
                and _within(imp.module, PACKAGE):
            out.append(Violation("only dp_ops.airflow imports Airflow", where, ""))
        if _within(imp.module, f"{PACKAGE}.privacy"):
            own = _within(imp.target, f"{PACKAGE}.privacy") or _within(
                imp.target, f"{PACKAGE}.errors") or _within(imp.target, f"{PACKAGE}.requests")
            if top == PACKAGE and not own:
                out.append(Violation("the privacy kernel imports only itself, errors and "
                                     "requests", where, ""))
            elif top != PACKAGE and top not in KERNEL_THIRD_PARTY and not (
                    top in KERNEL_MIGRATIONS_THIRD_PARTY
                    and any(_within(imp.module, m) for m in KERNEL_MIGRATIONS)) and not (
                    top in KERNEL_KEY_THIRD_PARTY
                    and any(_within(imp.module, m) for m in KERNEL_KEY)):
                out.append(Violation("the privacy kernel imports no file, engine, dataframe "
                                     "or Airflow code", where, f"{top} is not allowed"))
        if imp.module == f"{PACKAGE}.errors" and top not in ("__future__",):
            out.append(Violation("dp_ops.errors imports nothing", where, ""))
        if imp.module == f"{PACKAGE}.requests" and top not in (
                "__future__", "re", "unicodedata", "datetime") and imp.target != \
                f"{PACKAGE}.errors.BadRequest":
            out.append(Violation("dp_ops.requests imports only errors and the standard "
                                 "library's text and dates", where, ""))
        if top in ENGINE_LIBRARIES and _within(imp.module, PACKAGE) and not any(
                _within(imp.module, r) for r in ROW_READERS):
            out.append(Violation("only the engines and ingest run SQL over private rows",
                                 where, ""))
        if _within(imp.module, f"{PACKAGE}.steps") and _within(imp.target,
                                                             f"{PACKAGE}.reports"):
            out.append(Violation("steps are report-agnostic", where, ""))
        if _within(imp.module, f"{PACKAGE}.engine") and any(
                _within(imp.target, f"{PACKAGE}.{p}") for p in ("steps", "reports", "airflow")):
            out.append(Violation("engines know no steps, reports or Airflow", where, ""))
    # a loop closed by an import for the type checker only is a circle all the same: the
    # modules cannot be read, or moved, one without the other
    out += [Violation("no import cycles", " -> ".join(cycle), "")
            for cycle in cycles(all_imports(root, type_checking=True), modules)]
    out += report_names_used(root)
    return out


def cycles(imports: list[Import], modules: set[str]) -> list[list[str]]:
    """The import cycles among project modules (each reported once, as a path)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        target = _resolve(imp.target, modules)
        if target is not None and target != imp.module:
            # importing a package's submodule also runs the package's __init__; that
            # edge is the package's, so a package importing its own submodules is fine
            graph[imp.module].add(target)
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    found.append(cycle)
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


# -- nothing outside a report's package or a source's module names it -----------------------

REPORT_RULE = "nothing outside a report's package names a report"
SOURCE_RULE = "nothing outside a source's module names a source"


def report_packages(root: Path) -> dict[str, str]:
    """Report name -> its package, for every ``dp_ops/reports/<name>/spec.py``."""
    return {p.parent.name: f"{PACKAGE}.reports.{p.parent.name}"
            for p in sorted((root / PACKAGE / "reports").glob("*/spec.py"))}


def source_modules(root: Path) -> dict[str, str]:
    """Source name -> its module, for every ``dp_ops/sources/<name>.py`` (or package) but
    the registry's own ``spec``."""
    base = root / PACKAGE / "sources"
    names = {p.stem for p in base.glob("*.py")}
    names |= {p.parent.name for p in base.glob("*/__init__.py")}
    return {n: f"{PACKAGE}.sources.{n}" for n in sorted(names - {"__init__", "spec"})}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the module, class and function docstring nodes of ``tree``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def report_names_used(root: Path) -> list[Violation]:
    """Every module of dp_ops outside the reports' packages and the sources' modules that
    imports one of them or has a report's or a source's name in a string of its code
    (docstrings and comments are prose, not code): such a module would have to be edited
    to add a report or a source. A name counts wherever it stands between non-alphanumeric
    characters: ``mobility_release``, ``symptoms.txt`` and ``ingest_search_activity`` all
    name one."""
    reports, sources = report_packages(root), source_modules(root)
    owners = {**{n: (REPORT_RULE, pkg) for n, pkg in reports.items()},
              **{n: (SOURCE_RULE, mod) for n, mod in sources.items()}}
    if not owners:
        return []
    word = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, sorted(owners, key=len,
                                                                            reverse=True)))
                      + r")(?![A-Za-z0-9])")
    out: list[Violation] = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        module = module_name(root, path)
        if any(_within(module, owner) for _, owner in owners.values()):
            continue
        for imp in imports_of(root, path):
            named = [n for n, (_, owner) in owners.items() if _within(imp.target, owner)]
            if named:
                out.append(Violation(owners[named[0]][0], f"{module}:{imp.line} imports "
                                     f"{imp.target}", f"names {named[0]}"))
        tree = ast.parse(path.read_text(), filename=str(path))
        prose = _docstrings(tree)
        for node in _walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in prose:
                for found in word.finditer(node.value):
                    out.append(Violation(owners[found.group(1)][0], f"{module}:{node.lineno}",
                                         f"the string {node.value[:50]!r} names "
                                         f"{found.group(1)}"))
                    break
    return out
