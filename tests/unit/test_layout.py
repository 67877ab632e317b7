"""The package layout the style guide promises, checked on the source.

Imports go one way (``reference_sinks`` -> ``sinkv2_spark`` -> ``sinkv2``), no
package imports another package's private module (a ``_name`` anywhere in the
dotted path), no module imports another module's private name (inside one package
too), and every package's modules import each other without cycles (``TYPE_CHECKING``
and function-level imports included: a cycle there is still a tangle to read).
Imports are absolute, so these checks see them all. Inside ``sinkv2_spark`` the
layers go one way too: the doors use the shared rules and the engine, the rules use
the engine, the engine uses neither. A module over 450 lines says why at its top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sinkv2", "sinkv2_spark", "reference_sinks")
MAY_IMPORT = {
    "sinkv2": {"sinkv2"},
    "sinkv2_spark": {"sinkv2", "sinkv2_spark"},
    "reference_sinks": {"sinkv2", "sinkv2_spark", "reference_sinks"},
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every absolute module a file imports (at any depth), with the line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from pkg import name` may name a module (`_private` or not): count it too,
            # so an edge to a submodule is seen whichever way it is imported.
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def package_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of the three (not a name inside one)."""
    path = ROOT / Path(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def names_private_thing(dotted: str) -> bool:
    """A private module, or a private name (``from pkg import _name``)."""
    return is_module(dotted) or dotted.rsplit(".", 1)[-1].startswith("_")


def is_private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split("."))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_go_one_way_and_never_into_another_packages_private_module(package):
    wrong = []
    for path in package_files(package):
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            if top not in PACKAGES:
                continue
            where = f"{path.relative_to(ROOT)}:{line} imports {module}"
            if top not in MAY_IMPORT[package]:
                wrong.append(f"{where} (against the direction of imports)")
            elif top != package and is_private(module) and names_private_thing(module):
                wrong.append(f"{where} (a private module of {top}; use its public name)")
    assert not wrong, "\n".join(wrong)


def import_graph(package: str) -> dict[str, set[str]]:
    modules = {module_name(path): path for path in package_files(package)}
    return {
        name: {
            module
            for _, module in imported_modules(path)
            if module in modules and module != name and not name.startswith(f"{module}.")
        }
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for target in sorted(graph[node]):
            cycle = visit(target, [*path, node])
            if cycle:
                return cycle
        done.add(node)
        return None

    for node in sorted(graph):
        cycle = visit(node, [])
        if cycle:
            return cycle
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_a_packages_modules_import_each_other_without_cycles(package):
    cycle = find_cycle(import_graph(package))
    assert cycle is None, " -> ".join(cycle or [])


def private_names_from_other_modules(package: str) -> list[str]:
    """``from pkg._mod import _name`` where the importer is another module: a private reach."""
    found = []
    for path in package_files(package):
        importer = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                continue
            if node.module.split(".")[0] != package or node.module == importer:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name} from {node.module}"
                for alias in node.names
                if alias.name.startswith("_")
                and not alias.name.startswith("__")
                and not is_private_module_name(node.module, alias.name)
            ]
    return found


def is_private_module_name(module: str, name: str) -> bool:
    """Whether ``module.name`` is a module (``from pkg import _sub``), not a private name."""
    return (ROOT / Path(*module.split("."), f"{name}.py")).exists() or (
        ROOT / Path(*module.split("."), name) / "__init__.py"
    ).exists()


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_another_modules_private_names(package):
    found = private_names_from_other_modules(package)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_are_absolute(package):
    relative = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in package_files(package)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert not relative, "relative imports (write them absolute): " + ", ".join(relative)


# sinkv2_spark's folders, lowest first: each may import only the ones before it.
SPARK_LAYERS = ("sinkv2_spark._engine", "sinkv2_spark._rules", "sinkv2_spark._doors")


def test_sinkv2_spark_layers_go_one_way():
    wrong = []
    for path in package_files("sinkv2_spark"):
        importer = module_name(path)
        layer = next((i for i, top in enumerate(SPARK_LAYERS) if is_in(importer, top)), None)
        if layer is None:
            continue
        for line, module in imported_modules(path):
            above = [top for top in SPARK_LAYERS[layer + 1 :] if is_in(module, top)]
            if above:
                wrong.append(
                    f"{path.relative_to(ROOT)}:{line} imports {module}: "
                    f"{SPARK_LAYERS[layer]} may not import {above[0]}"
                )
    assert not wrong, "\n".join(wrong)


def is_in(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


LONG_MODULE_LINES = 450
SAYS_WHY = "Over 450 lines because"


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_over_450_lines_say_why(package):
    unexplained = []
    for path in package_files(package):
        text = path.read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(text, str(path))) or ""
        lines = text.count("\n")
        if lines > LONG_MODULE_LINES and SAYS_WHY not in " ".join(docstring.split()):
            unexplained.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not unexplained, (
        f"split these by idea, or say why they are long ({SAYS_WHY!r} in the module "
        "docstring): " + ", ".join(unexplained)
    )
