import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
