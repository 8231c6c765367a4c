"""The paper's ablation (its Table 7) as build variants of one base config."""

from __future__ import annotations

from typing import Any

from synrail.config import DEFAULT_HARMONIZE, BuildConfig, set_dotted

# variant -> (harmonize, metric rescale, random texture); the paper's rows 1-5
TABLE7_VARIANTS: dict[str, tuple[bool, bool, bool]] = {
    "baseline": (False, False, False),
    "harmony": (True, False, False),
    "rescale": (False, True, False),
    "random-texture": (False, False, True),
    "all": (True, True, True),
}


def ablation_variants(base: BuildConfig, shared_cache_url: str) -> dict[str, BuildConfig]:
    """Each Table 7 variant of ``base``, all sharing one cache (the stages a switch does not touch,
    such as backgrounds, are computed once)."""
    variants = {}
    for name, (harmony, rescale, texture) in TABLE7_VARIANTS.items():
        data: dict[str, Any] = base.model_dump(mode="json")
        set_dotted(data, "name", f"{base.name}-{name}")
        harmonizer = base.compose.harmonize or DEFAULT_HARMONIZE  # a base without harmonization gets the default
        set_dotted(data, "compose.harmonize", harmonizer.model_dump(mode="json") if harmony else None)
        set_dotted(data, "compose.scale", "metric" if rescale else "linear")
        set_dotted(data, "gallery.random_texture", texture)
        set_dotted(data, "execution.cache_url", shared_cache_url)
        variants[name] = BuildConfig.model_validate(data)
    return variants
