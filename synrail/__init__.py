"""SynRail: synthetic railway-obstacle detection datasets (library layer, Prefect-free)."""

__version__ = "0.1.0"
