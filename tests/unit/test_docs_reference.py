"""The documentation's generated reference pages cover the code: every config key (enumerated from the
pydantic JSON schema, independently of the generator's own walk) and every CLI command."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from synrail.config import BuildConfig

ROOT = Path(__file__).resolve().parents[2]


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _schema_keys(schema: dict, node: dict, prefix: str = "") -> set[str]:
    """Dotted keys of every property reachable from ``node`` (through $ref, anyOf, oneOf, arrays, maps)."""
    keys: set[str] = set()
    if "$ref" in node:
        return _schema_keys(schema, schema["$defs"][node["$ref"].split("/")[-1]], prefix)
    for option in node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", []):
        keys |= _schema_keys(schema, option, prefix)
    for child in ("items", "additionalProperties"):
        if isinstance(node.get(child), dict):
            keys |= _schema_keys(schema, node[child], prefix)
    for item in node.get("prefixItems", []):
        keys |= _schema_keys(schema, item, prefix)
    for name, sub in node.get("properties", {}).items():
        keys.add(f"{prefix}{name}")
        keys |= _schema_keys(schema, sub, f"{prefix}{name}.")
    return keys


def _strip_tags(key: str) -> str:
    while "[" in key:
        start = key.index("[")
        key = key[:start] + key[key.index("]") + 1:]
    return key


def test_the_configuration_reference_covers_every_key():
    schema = BuildConfig.model_json_schema()
    expected = _schema_keys(schema, schema)
    assert {"gallery.sources.root", "backgrounds.video.gauge_mm", "compose.harmonize.model",
            "execution.cache_url", "weather.mix"} <= expected
    page = _hooks().config_reference()
    documented = {_strip_tags(line.split("`")[1]) for line in page.splitlines() if line.startswith("| `")}
    assert expected - documented == set(), "keys missing from the configuration reference"


def test_the_cli_reference_has_every_command():
    page = _hooks().cli_reference()
    for command in ("build", "ablation", "validate", "train", "evaluate"):
        assert f"## `synrail {command}`" in page
    assert "--overwrite" in page and "--set FIELD=VALUE" in page


def test_the_generated_markers_are_all_known():
    hooks = _hooks()
    for page in (ROOT / "docs").rglob("*.md"):
        for name in hooks.MARKER.findall(page.read_text()):
            assert hooks.generate(name).strip(), f"{page}: {name} generates nothing"


def test_every_committed_result_renders_on_a_benchmark_page():
    hooks = _hooks()
    pages = "".join(page.read_text() for page in (ROOT / "docs" / "benchmarks").glob("*.md"))
    for result in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        relative = result.relative_to(ROOT).as_posix()
        assert f"<!-- generated: results:{relative} -->" in pages, f"{relative} is on no benchmark page"
        table = hooks.results(relative)
        assert table.count("| group |") >= 1 and "None" not in table  # missing figures read "-"


def test_every_benchmark_page_opens_with_generated_figures():
    hooks = _hooks()
    for page in (ROOT / "docs" / "benchmarks").glob("*.md"):
        if page.name == "index.md":
            continue
        text = page.read_text()
        latest = text.split("## Latest figures", 1)[1].split("\n## ", 1)[0] if "## Latest figures" in text else ""
        assert any(name.startswith("results:") for name in hooks.MARKER.findall(latest)), page.name
