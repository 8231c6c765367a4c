"""Every guide page runs: the commands of docs/getting-started/ and docs/how-to/, as a user types them.

A guide page marks what a test can run with HTML comments, invisible on the site:

- ``<!-- runnable: tiny -->`` before a fenced block: its commands run in bash, in one shared work
  folder, with the venv's ``synrail`` and ``python`` first on PATH; they must exit 0 and print no
  traceback. They use ``configs/tiny.yaml`` (or another small config of the repository, or one the
  page writes) and small image counts, so the whole test stays near a minute and a half.
- ``<!-- runnable-file: NAME -->`` before a fenced block: its text is written to ``NAME`` in the work
  folder first (a config or a sidecar the page shows), for the page's commands to use.

Paths under ``/data/`` in either are the test's own small inputs (below: cab videos, a folder of
frame sequences, RGBA cutouts, a PennFudan folder, a COCO file), written into the work folder;
``out/...`` lands in it too. Pages run in the order of the site's navigation, so a later page may
use what an earlier one made (``out/tiny`` from the two commands, ``my-line.yaml`` from the cab
videos page) instead of building it again. A guide page without a runnable block fails the test
unless ``NOT_RUNNABLE`` lists it with the reason.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from galleries import coco_dogs, person_fixture
from media import cab_frames, write_video_folder

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GUIDES = ("getting-started", "how-to")
BIN = Path(sys.executable).parent

# Pages whose commands need services this machine does not run; each is covered elsewhere.
NOT_RUNNABLE = {
    "how-to/s3.md": "needs an S3 endpoint and credentials (tests/integration/test_s3_build.py builds against "
                    "a moto S3 server)",
    "how-to/scale.md": "needs a Dask or Ray cluster (tests/integration/test_task_runners.py builds on both "
                       "and compares the bytes)",
    "how-to/versioned-datasets.md": "needs a Prefect server, work pools and workers "
                                    "(tests/integration/test_deployments_e2e.py deploys and runs them)",
}

BLOCK = re.compile(r"<!--\s*(runnable|runnable-file):\s*([^>]*?)\s*-->\s*\n```[\w-]*\n(.*?)\n```", re.DOTALL)
DATA = re.compile(r"(?<![\w./-])/data/")


def guide_pages() -> list[str]:
    """The guide pages, relative to docs/, in the order of mkdocs.yml's navigation."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def walk(item) -> list[str]:
        if isinstance(item, str):
            return [item]
        if isinstance(item, list):
            return [page for child in item for page in walk(child)]
        return [page for child in item.values() for page in walk(child)]

    return [page for page in walk(nav) if page.split("/")[0] in GUIDES]


def blocks(page: str) -> list[tuple[str, str, str]]:
    """(kind, argument, text) of every runnable or runnable-file block of a page, in page order."""
    return [match.groups() for match in BLOCK.finditer((DOCS / page).read_text())]


def run_block(text: str, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a block's commands in bash (stopping at the first failing one) in ``work``."""
    script = DATA.sub(f"{work}/data/", text)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)


def write_inputs(data: Path) -> None:
    """The /data/ inputs the pages name, small enough to build from in seconds."""
    write_video_folder(data / "cab-videos")  # line0..2.avi (4 frames each), a broken one, meta.csv
    for sequence in ("seq_a", "seq_b", "seq_c"):
        (data / "railsem19" / sequence).mkdir(parents=True)
        for k, frame in enumerate(cab_frames(len(sequence) + ord(sequence[-1]), 3)):
            cv2.imwrite(str(data / "railsem19" / sequence / f"{k:04d}.jpg"), frame)

    (data / "cutouts" / "cows").mkdir(parents=True)
    for k in range(2):
        rgba = np.zeros((90, 140, 4), np.uint8)
        cv2.ellipse(rgba, (70, 45), (55, 28), 0, 0, 360, (40 + 50 * k, 60, 120, 255), -1)
        cv2.imwrite(str(data / "cutouts" / "cows" / f"cow{k}.png"), rgba)

    person_fixture(data / "PennFudanPed")
    coco_dogs(data / "coco")


def test_every_guide_page_has_a_runnable_block_or_a_reason():
    pages = guide_pages()
    on_disk = sorted(str(p.relative_to(DOCS)) for folder in GUIDES for p in (DOCS / folder).glob("*.md"))
    assert sorted(pages) == on_disk  # every guide page is in the navigation, so it runs below
    missing = [page for page in pages if not any(kind == "runnable" for kind, _, _ in blocks(page))
               and page not in NOT_RUNNABLE]
    assert missing == [], f"guide pages with no <!-- runnable: tiny --> block and no reason in NOT_RUNNABLE: {missing}"
    assert set(NOT_RUNNABLE) <= set(pages), "NOT_RUNNABLE names a page that is not a guide"
    listed_but_runnable = [page for page in NOT_RUNNABLE if blocks(page)]
    assert listed_but_runnable == [], f"runnable pages still listed in NOT_RUNNABLE: {listed_but_runnable}"


def test_a_failing_command_stops_its_block(tmp_path):
    result = run_block("true\nfalse\ntouch after", tmp_path, dict(os.environ))
    assert result.returncode != 0 and not (tmp_path / "after").exists()
    result = run_block("echo /data/x", tmp_path, dict(os.environ))
    assert result.stdout.strip() == f"{tmp_path}/data/x"  # /data/ is the test's inputs


def test_every_guides_commands_run_on_the_tiny_inputs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for shared in ("configs", "benchmarks"):  # what the pages name relative to the repository root
        (work / shared).symlink_to(ROOT / shared)
    write_inputs(work / "data")
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PREFECT_HOME=str(tmp_path / "prefect"),
               HOME=str(tmp_path / "home"))

    failures, timings, ran = [], [], 0
    for page in guide_pages():
        for kind, argument, text in blocks(page):
            if kind == "runnable-file":
                (work / argument).write_text(DATA.sub(f"{work}/data/", text) + "\n")
                continue
            assert argument == "tiny", f"{page}: unknown runnable kind {argument!r}"
            started = time.perf_counter()
            result = run_block(text, work, env)
            timings.append(f"{time.perf_counter() - started:5.1f} s  {page}")
            ran += 1
            output = result.stdout + result.stderr
            if result.returncode != 0 or "Traceback" in output:
                failures.append(f"{page} (exit {result.returncode}):\n{text}\n--- output ---\n{output[-3000:]}")
    print("\n".join(timings))
    assert ran >= len(guide_pages()) - len(NOT_RUNNABLE)
    assert not failures, "\n\n".join(failures)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q", "-s"]))
