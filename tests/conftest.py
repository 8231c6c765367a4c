"""Prefect settings for the tests: offline defaults, and a Prefect home of their own."""

import os
import tempfile

from flows.prefect_env import configure_prefect_environment

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="synrail-test-prefect-"))
configure_prefect_environment(verbose=False)
