"""Settings for the tests: Prefect's offline defaults, and a Prefect home and an Ultralytics settings
folder of their own, removed when the test run ends."""

import atexit
import os
import shutil
import tempfile

from flows.prefect_env import configure_prefect_environment


def _run_temp_dir(prefix: str) -> str:
    """A temporary folder that lives as long as the test run (a leak per run fills CI's disk)."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


if "PREFECT_HOME" not in os.environ:
    os.environ["PREFECT_HOME"] = _run_temp_dir("synrail-test-prefect-")
# Ultralytics writes its settings (sync off, see detector.py) here, not into the user's own config
if "YOLO_CONFIG_DIR" not in os.environ:
    os.environ["YOLO_CONFIG_DIR"] = _run_temp_dir("synrail-test-ultralytics-")
configure_prefect_environment(verbose=False)
