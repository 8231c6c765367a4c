"""The errors that mean "the inputs are wrong", as opposed to a failure of the build itself.

The command line prints these as one message and exits 2 (``flows/cli.py``); anything else is a
build failure (exit 1). This module imports nothing, so every layer can raise them.
"""

from __future__ import annotations


class InputError(ValueError):
    """The inputs cannot make this dataset: a split without backgrounds, a class without cutouts, a
    missing source folder, a malformed annotation file or sidecar. The message names the key or path."""
