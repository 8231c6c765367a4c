"""The whole build as one plain loop over the stage functions, without Prefect.

The flow in ``flows/build_dataset.py`` runs the same calls as tasks; this loop is what it is
measured against (benchmarks/compose.py) and what tests use when orchestration is beside the point.
"""

from __future__ import annotations

from synrail import pipeline
from synrail.config import BuildConfig
from synrail.export.dataset import ExportSummary, export_dataset
from synrail.output import claim_output
from synrail.store import Store


def build_in_process(cfg: BuildConfig, out_url: str, overwrite: bool = False) -> ExportSummary:
    out = Store(out_url)
    claim_output(out, cfg, overwrite)
    cache = Store(cfg.execution.cache_url or out.url(".synrail/cache"))
    backgrounds = [pipeline.prepare_background(cfg, i, cache) for i in range(cfg.backgrounds.count)]
    gallery = pipeline.prepare_gallery(cfg, cache)
    chunks = [pipeline.compose_chunk(cfg, first, stop, backgrounds, gallery, cache, out)
              for first, stop in pipeline.chunk_ranges(cfg.num_images, cfg.execution.chunk_size)]
    return export_dataset(cfg, chunks, backgrounds, gallery, out)
