"""The background stage for procedural scenes: a rendered frame with its exact track area and camera.

Cab videos and image folders have their own stage (``synrail.stages.videos``).
"""

from __future__ import annotations

from synrail.config import BuildConfig
from synrail.export.coco import encode_rle
from synrail.randomness import Stream, rng_for
from synrail.records import BackgroundRecord
from synrail.sources.procedural_backgrounds import render_background, sample_background_spec
from synrail.stages.splits import background_plan
from synrail.storage.codecs import encode_image
from synrail.storage.store import Store, sha256_bytes

CONFIG_SECTIONS = ("seed", "image", "splits", "backgrounds")


def prepare_background(cfg: BuildConfig, index: int, cache: Store) -> BackgroundRecord:
    """Render procedural background ``index`` with its exact track area and camera geometry.

    Args:
        cfg: the build config (reads ``CONFIG_SECTIONS``).
        index: the background's index, 0 .. ``backgrounds.count`` - 1.
        cache: the build's cache store; the PNG is written there.

    Returns:
        The background's record (its PNG path is relative to ``cache``).
    """
    bgc = cfg.backgrounds
    split, condition, track_type = background_plan(cfg)[index]
    spec = sample_background_spec(
        rng_for(cfg.seed, Stream.BACKGROUND, index), width=cfg.image.width, height=cfg.image.height,
        track_types=[track_type], conditions={condition: 1.0}, camera_height_m=bgc.camera.height_m,
        pitch_deg=bgc.camera.pitch_deg, hfov_deg=bgc.camera.hfov_deg, max_curvature=bgc.max_curvature,
        max_offset_m=bgc.max_offset_m)
    png = encode_image(render_background(spec), ".png")
    sha = sha256_bytes(png)
    path = f"backgrounds/{sha[:24]}.png"
    cache.write_bytes(path, png)
    mask = spec.geometry.track_mask()
    return BackgroundRecord(
        background_id=f"bg-{cfg.seed}-{index:05d}", index=index, split=split,
        source=f"procedural/{spec.track_type}", path=path, sha256=sha, width=cfg.image.width,
        height=cfg.image.height, track_type=spec.track_type, condition=spec.condition, geometry=spec.geometry,
        fog_beta=spec.fog_beta, airlight_bgr=tuple(float(c) for c in spec.fog_colour_bgr),
        illumination_bgr=tuple(float(c) for c in spec.illumination_bgr), sensor_noise=float(spec.sensor_noise),
        rail_area=encode_rle(mask), rail_area_px=int(mask.sum()),
        light_deg=(float(spec.sun_azimuth_deg), float(spec.sun_elevation_deg)))
