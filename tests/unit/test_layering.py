import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_library_never_imports_prefect():
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "synrail").rglob("*.py"))
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + \
           "print([m for m in sys.modules if m == 'prefect' or m.startswith('prefect.')])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_required_top_level_layout():
    for name in ["flows", "tasks", "synrail", "deployments", "docker", "tests", "prefect.yaml", "pyproject.toml"]:
        assert (ROOT / name).exists(), name


KERNELS = ("rail", "sources", "segment", "compose", "train")


def _synrail_imports(path: Path) -> set[str]:
    """The synrail modules a file imports (top-level and nested imports alike)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("synrail"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("synrail"))
    return found


def _package_files(package: str) -> list[Path]:
    return sorted((ROOT / "synrail" / package).rglob("*.py"))


def test_kernels_storage_and_formats_never_import_a_stage():
    for package in (*KERNELS, "storage", "export"):
        for path in _package_files(package):
            stages = sorted(m for m in _synrail_imports(path) if m.startswith("synrail.stages"))
            assert not stages, f"{path.relative_to(ROOT)} imports {stages}: arrows run from stages to kernels"


def test_storage_imports_nothing_above_it():
    """Storage may know the config (an output folder is claimed for one build hash), nothing else."""
    for path in _package_files("storage"):
        above = sorted(m for m in _synrail_imports(path)
                       if not m.startswith(("synrail.storage", "synrail.__version__", "synrail.config"))
                       and m != "synrail")
        assert not above, f"{path.relative_to(ROOT)} imports {above}"


def test_every_stage_module_is_wrapped_or_named_as_a_plain_loop():
    stages = {p.stem for p in (ROOT / "synrail" / "stages").glob("*.py")} - {"__init__"}
    assert stages == {"splits", "backgrounds", "videos", "gallery", "inputs", "compose", "export", "versions", "local",
                      "sequences", "real_clips"}


def test_nothing_outside_the_registry_makes_a_generator():
    """One registry of random streams: ``default_rng`` (or a legacy seeding call) only in randomness.py."""
    offenders = []
    for folder in ("synrail", "flows", "tasks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "synrail" / "randomness.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr in ("default_rng", "RandomState", "seed") \
                        and isinstance(node.value, ast.Attribute) and node.value.attr == "random":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                if isinstance(node, ast.ImportFrom) and node.module == "numpy.random":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


DOCUMENTED = (*KERNELS, "export", "storage", "stages")


def _entry_points(package: str) -> list[tuple[str, ast.FunctionDef, str]]:
    """``(file::qualified name, node, docstring)`` of every public function and method of a package
    that takes more than one argument besides ``self``/``cls``."""
    found = []
    for path in _package_files(package):
        def visit(body: list[ast.stmt], prefix: str, rel: str = str(path.relative_to(ROOT))) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    visit(node.body, f"{prefix}{node.name}.")
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                    a = node.args
                    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
                    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
                    if len(names) > 1:
                        found.append((f"{rel}::{prefix}{node.name}", node, ast.get_docstring(node) or ""))
        visit(ast.parse(path.read_text()).body, "")
    return found


def _returns_something(node: ast.FunctionDef) -> bool:
    return not (node.returns is None or (isinstance(node.returns, ast.Constant) and node.returns.value is None))


def test_stage_entry_points_and_public_kernels_document_args_and_returns():
    """Args: (ruff's D417 then checks it names every argument) and Returns: unless the function returns None."""
    missing = []
    for package in DOCUMENTED:
        for name, node, doc in _entry_points(package):
            if "Args:" not in doc:
                missing.append(f"{name}: no Args:")
            elif _returns_something(node) and not ("Returns:" in doc or "Yields:" in doc):
                missing.append(f"{name}: no Returns:")
    assert not missing, missing
