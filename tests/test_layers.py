"""Every module has a place in the layering, and Dagster's private modules have one door.

pyproject.toml's import-linter contracts say what may import what (`lint-imports`, first in `make test`); a module
that no contract names is checked by none. Here every module of the four packages must be named, itself or through
a package above it, by exactly one of the two contracts that say which layer it is in: the core (never imports
Dagster) or the Dagster layer. A package whose modules are placed one by one (`focus_dagster`,
`focus_dagster.platform`) is itself in no layer and so imports nothing. And only
`focus_dagster.platform.dagster_private` imports `dagster._core`, each name with its reason.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("focus_dagster", "assets", "resources", "checks")
CORE = "The core never imports Dagster nor the Dagster layer"
DAGSTER_LAYER = "The Dagster layer, top to bottom"
PRIVATE_DOOR = "focus_dagster.platform.dagster_private"


def _contracts() -> dict[str, list[dict]]:
    linter = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {contract["name"]: contract for contract in linter["contracts"]}


def _placed() -> dict[str, set[str]]:
    """contract name -> the modules and packages it names (a layer `a | b` names both)."""
    contracts = _contracts()
    layers = {name.strip().strip("()") for layer in contracts[DAGSTER_LAYER]["layers"]
              for name in layer.replace(":", "|").split("|")}
    return {CORE: set(contracts[CORE]["source_modules"]), DAGSTER_LAYER: layers}


def _modules() -> dict[str, Path]:
    """Every module of the four packages, by dotted name (a package by its __init__.py)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _covered_by(module: str, names: set[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def _imports(path: Path) -> list[str]:
    """The modules `path` imports (`from __future__` aside), wherever in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module != "__future__":
            found.append(node.module)
    return found


def test_the_contracts_name_only_modules_that_exist():
    modules = _modules()
    for contract, names in _placed().items():
        assert not (missing := sorted(n for n in names if n not in modules)), f"{contract} names no module: {missing}"


def test_every_module_is_in_exactly_one_layer():
    placed, modules = _placed(), _modules()
    unplaced, twice, containers = [], [], []
    for module in modules:
        covering = [contract for contract, names in placed.items() if _covered_by(module, names)]
        if len(covering) > 1:
            twice.append(module)
        elif not covering:
            below = any(_covered_by(other, names) for other in modules if other.startswith(module + ".")
                        for names in placed.values())
            (containers if below else unplaced).append(module)
    assert not unplaced, (f"modules in no layer: {unplaced}; add each to the core contract or to the Dagster "
                          "layer's contract in pyproject.toml [tool.importlinter]")
    assert not twice, f"modules in both the core and the Dagster layer: {twice}"
    # A package whose modules are placed one by one belongs to no layer itself: it must import nothing.
    for package in containers:
        assert not _imports(modules[package]), f"{package} is in no layer (its modules are) and so imports nothing"


def test_only_one_module_imports_dagster_private_modules():
    importers = sorted(module for module, path in _modules().items()
                       if any(name == "dagster._core" or name.startswith("dagster._core.") for name in _imports(path)))
    assert importers == [PRIVATE_DOOR], (f"{[m for m in importers if m != PRIVATE_DOOR]} import dagster._core: import "
                                         f"the name from {PRIVATE_DOOR}, with the reason the public API does not do")


def test_the_private_door_says_why_for_every_name():
    tree = ast.parse(_modules()[PRIVATE_DOOR].read_text())
    lines = (ROOT / "focus_dagster/platform/dagster_private.py").read_text().splitlines()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            assert lines[node.lineno - 2].startswith("#"), f"line {node.lineno}: say why above the import"


def test_no_module_of_resources_imports_its_package():
    """`resources/__init__.py` exports the resource classes lazily; its modules import one another by their own
    names (`resources.layout`), so the package and its modules never import one another in a circle."""
    modules = _modules()
    through_package = sorted(module for module, path in modules.items()
                             if module.startswith("resources.") and "resources" in _imports(path))
    assert not through_package, f"import from resources.<module>, not from the package: {through_package}"
    package_imports = [node for node in ast.walk(ast.parse(modules["resources"].read_text()))
                       if isinstance(node, (ast.Import, ast.ImportFrom)) and node.col_offset == 0
                       and getattr(node, "module", None) not in ("__future__", "importlib", "typing")]
    assert not package_imports, "resources/__init__.py imports its modules lazily only"
