"""Build every Table 7 variant of one config, sharing caches: OUT/<variant>/ each a full dataset."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from flows.build_dataset import build_dataset
from synrail.ablation import TABLE7_VARIANTS, ablation_variants
from synrail.config import BuildConfig
from synrail.stages.export import ExportSummary
from synrail.storage.store import Store


@flow(name="build-ablation")
def build_ablation(config: BuildConfig, out_url: str, overwrite: bool = False) -> dict[str, ExportSummary]:
    out = Store(out_url)
    shared_cache = config.execution.cache_url or out.url(".synrail-shared-cache")
    summaries = {name: build_dataset(variant, out.url(name), overwrite)
                 for name, variant in ablation_variants(config, shared_cache).items()}
    create_table_artifact(key="ablation-variants", description="the paper's Table 7 variants", table=[
        {"variant": name, "harmony": h, "rescale": r, "random_texture": t,
         "images": sum(summaries[name].images_per_split.values())}
        for name, (h, r, t) in TABLE7_VARIANTS.items()])
    return summaries
