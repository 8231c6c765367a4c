"""The build's stages as plain functions: the Prefect tasks wrap these one to one, and a plain loop
over them (benchmarks/compose.py) builds the same dataset without Prefect.

Stages hand each other small records (pydantic models holding store paths and content hashes),
never pixel arrays. Each stage draws its randomness from its own stream of ``(seed, stream, index)``
so that what an image looks like never depends on chunking, scheduling or worker count.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict

from synrail.compose.composite import Composite, GalleryCutout, SceneBackground, compose_image
from synrail.compose.placement import track_rows
from synrail.compose.quality import QualityScore, composite_quality, resample_seed
from synrail.config import BuildConfig, ProceduralSource
from synrail.export.coco import decode_rle, encode_rle, rle_box_and_area
from synrail.export.yolo import yolo_line
from synrail.rail.geometry import CameraGeometry
from synrail.sources.procedural_backgrounds import (render_background,
                                                    sample_background_spec)
from synrail.sources.gallery_sources import dtd_texture_loader, read_dtd_textures
from synrail.sources.procedural_obstacles import render_cutout
from synrail.store import Store, StoreError, sha256_bytes

SPLITS = ("train", "val", "test")
# Random streams: one per stage, so adding draws to one stage never shifts another.
STREAM_BACKGROUND, STREAM_GALLERY, STREAM_IMAGE, STREAM_SPLIT, STREAM_WEATHER = 1, 2, 3, 4, 6


class Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class BackgroundRecord(Record):
    background_id: str
    index: int
    split: str
    source: str
    path: str  # PNG, relative to the cache store
    sha256: str
    width: int
    height: int
    track_type: str
    condition: str
    geometry: CameraGeometry
    fog_beta: float
    airlight_bgr: tuple[float, float, float]
    illumination_bgr: tuple[float, float, float]
    sensor_noise: float
    rail_area: dict[str, Any]  # compressed RLE of the track area
    rail_area_px: int
    light_deg: tuple[float, float] | None = None  # sun azimuth, elevation when known (rendered scenes)


class GalleryRecord(Record):
    cutout_id: str
    class_name: str
    source: str
    path: str  # RGBA PNG, relative to the cache store
    sha256: str
    height_m: float
    width_px: int
    height_px: int
    mask_px: int
    mask_score: float = 1.0  # the segmenter's quality estimate; 1.0 for drawn or shipped masks


class ChunkRecord(Record):
    first: int
    stop: int
    images_path: str  # Parquet, relative to the output store
    annotations_path: str
    sha256: str  # of both tables together
    num_images: int
    num_annotations: int


def rng_for(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, index])


# -- splits --------------------------------------------------------------------------------------
def largest_remainder(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Split ``total`` in proportion to ``weights``; every key with weight gets at least one when possible."""
    keys = list(weights)
    scale = total / sum(weights.values())
    wanted = {k: weights[k] * scale for k in keys}
    counts = {k: math.floor(v) for k, v in wanted.items()}
    for k in sorted(keys, key=lambda k: counts[k] - wanted[k])[: total - sum(counts.values())]:
        counts[k] += 1
    for k in keys:
        donor = max(keys, key=lambda d: counts[d])
        if weights[k] > 0 and counts[k] == 0 and counts[donor] > 1:
            counts[donor] -= 1
            counts[k] += 1
    return counts


def split_counts(total: int, fractions: Mapping[str, float]) -> dict[str, int]:
    return largest_remainder(total, {s: fractions[s] for s in SPLITS})


def image_splits(cfg: BuildConfig) -> list[str]:
    """Split of every image index: contiguous blocks train, val, test."""
    counts = split_counts(cfg.num_images, cfg.splits.fractions())
    return [s for s in SPLITS for _ in range(counts[s])]


def _shuffled_quota(counts: Mapping[str, int], rng: np.random.Generator) -> list[str]:
    ordered = [key for key, n in counts.items() for _ in range(n)]
    return [ordered[i] for i in rng.permutation(len(ordered))]


def background_plan(cfg: BuildConfig) -> list[tuple[str, str, str]]:
    """(split, condition, track type) of every background.

    Each background belongs to one split, so no scene is seen in training and testing both, and
    every split gets its own share of each condition and track type (drawn independently, a small
    validation split could end up all clear weather, and per-condition scores would be undefined).
    """
    bgc = cfg.backgrounds
    splits = _shuffled_quota(split_counts(bgc.count, cfg.splits.fractions()), rng_for(cfg.seed, STREAM_SPLIT, 0))
    plan: list[tuple[str, str, str]] = [("", "", "")] * bgc.count
    for k, split in enumerate(SPLITS, start=1):
        members = [i for i, s in enumerate(splits) if s == split]
        rng = rng_for(cfg.seed, STREAM_SPLIT, k)
        conditions = _shuffled_quota(largest_remainder(len(members), bgc.conditions), rng)
        tracks = _shuffled_quota(largest_remainder(len(members), {t: 1.0 for t in bgc.track_types}), rng)
        for i, condition, track in zip(members, conditions, tracks):
            plan[i] = (split, condition, track)
    return plan


def image_id(index: int) -> str:
    return f"{index:06d}"


# -- encoding ------------------------------------------------------------------------------------
def encode_image(image: np.ndarray, ext: str, params: Sequence[int] = ()) -> bytes:
    ok, buffer = cv2.imencode(ext, image, list(params))
    if not ok:
        raise ValueError(f"OpenCV could not encode a {image.shape} image as {ext}")
    return buffer.tobytes()


def decode_image(data: bytes, flags: int, origin: str) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
    if image is None:
        raise StoreError(f"{origin} is not a readable image")
    return image


def table_bytes(rows: Sequence[dict[str, Any]], schema: pa.Schema | None = None) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), buffer)
    return buffer.getvalue()


def read_table(store: Store, rel: str) -> list[dict[str, Any]]:
    return pq.read_table(io.BytesIO(store.read_bytes(rel))).to_pylist()


# -- stage 1: backgrounds ------------------------------------------------------------------------
def prepare_background(cfg: BuildConfig, index: int, cache: Store) -> BackgroundRecord:
    """Render procedural background ``index`` with its exact track area and camera geometry."""
    bgc = cfg.backgrounds
    split, condition, track_type = background_plan(cfg)[index]
    spec = sample_background_spec(
        rng_for(cfg.seed, STREAM_BACKGROUND, index), width=cfg.image.width, height=cfg.image.height,
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


# -- stage 2: obstacle gallery -------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _dtd_textures(root: str) -> Callable[[np.random.Generator], np.ndarray]:
    return dtd_texture_loader(read_dtd_textures(root))


def prepare_gallery_item(cfg: BuildConfig, class_name: str, index: int, cache: Store) -> GalleryRecord:
    """Render one procedural obstacle cutout (RGBA, exact alpha) with its physical size."""
    stream = STREAM_GALLERY * 1000 + cfg.classes.index(class_name)
    rng = rng_for(cfg.seed, stream, index)
    texture = None
    if class_name == "unseen_obstacle" and not cfg.gallery.random_texture:  # ablation: one flat colour
        texture = np.full((8, 8, 3), rng.integers(40, 220, 3), dtype=np.uint8)
    elif class_name == "unseen_obstacle" and cfg.gallery.dtd_root:  # the paper's DTD-filled random polygons
        texture = _dtd_textures(cfg.gallery.dtd_root)(rng)
    cutout = render_cutout(class_name, rng, pixel_height=cfg.gallery.render_height_px, texture=texture)
    png = encode_image(cutout.rgba, ".png")
    sha = sha256_bytes(png)
    path = f"gallery/{class_name}/{sha[:24]}.png"
    cache.write_bytes(path, png)
    return GalleryRecord(
        cutout_id=f"{class_name}-{index:04d}", class_name=class_name, source=f"procedural/{cutout.variant}",
        path=path, sha256=sha, height_m=cutout.height_m, width_px=cutout.rgba.shape[1],
        height_px=cutout.rgba.shape[0], mask_px=int((cutout.rgba[:, :, 3] > 0).sum()))


def prepare_gallery_class(cfg: BuildConfig, class_name: str, cache: Store) -> list[GalleryRecord]:
    """All ``gallery.per_class`` cutouts of one class (a few ms each: one task for the lot)."""
    return [prepare_gallery_item(cfg, class_name, i, cache) for i in range(cfg.gallery.per_class)]


def procedural_classes(cfg: BuildConfig, source: ProceduralSource) -> list[str]:
    return [c for c in cfg.classes if source.classes is None or c in source.classes]


def prepare_gallery(cfg: BuildConfig, cache: Store) -> list[GalleryRecord]:
    """The procedural gallery of every class (the benchmark's fixed input)."""
    return [record for name in cfg.classes for record in prepare_gallery_class(cfg, name, cache)]


# -- stage 3: composition ------------------------------------------------------------------------
# How hard shadows are under each light: direct sun casts them, diffuse light barely does.
SHADOW_SCALE = {"normal": 1.0, "overcast": 0.35, "fog": 0.25, "dusk": 0.3, "dark": 0.15, "rain": 0.3,
                "snow": 0.4}

@functools.lru_cache(maxsize=64)
def _load_scene_background(cache_url: str, record_json: str) -> SceneBackground:
    record = BackgroundRecord.model_validate_json(record_json)
    cache = Store(cache_url)
    image = decode_image(cache.read_bytes(record.path), cv2.IMREAD_COLOR, cache.url(record.path))
    mask = decode_rle(record.rail_area)
    return SceneBackground(image=image, track_mask=mask, track_rows=track_rows(mask), geometry=record.geometry,
                           fog_beta=record.fog_beta, airlight_bgr=record.airlight_bgr,
                           illumination_bgr=record.illumination_bgr, sensor_noise=record.sensor_noise,
                           light_deg=record.light_deg, shadow_scale=SHADOW_SCALE.get(record.condition, 0.6),
                           real_frame=record.source.startswith("video:"))


@functools.lru_cache(maxsize=4096)
def _load_cutout(cache_url: str, record_json: str) -> GalleryCutout:
    record = GalleryRecord.model_validate_json(record_json)
    cache = Store(cache_url)
    rgba = decode_image(cache.read_bytes(record.path), cv2.IMREAD_UNCHANGED, cache.url(record.path))
    return GalleryCutout(cutout_id=record.cutout_id, class_name=record.class_name, source=record.source,
                         rgba=rgba, height_m=record.height_m)


def gallery_by_class(cache: Store, gallery: Sequence[GalleryRecord]) -> dict[str, list[GalleryCutout]]:
    grouped: dict[str, list[GalleryCutout]] = {}
    for record in gallery:
        grouped.setdefault(record.class_name, []).append(_load_cutout(cache.root_url, record.model_dump_json()))
    return grouped


class ComposedImage(NamedTuple):
    background: BackgroundRecord
    composite: Composite
    condition: str  # the background's condition, or the weather laid over it
    quality: QualityScore | None
    attempts: int


def _attempt(cfg: BuildConfig, index: int, attempt: int, pool: Sequence[BackgroundRecord],
             gallery: Mapping[str, Sequence[GalleryCutout]], cache: Store) -> tuple[BackgroundRecord, Composite]:
    rng = np.random.default_rng(resample_seed(cfg.seed, index, attempt, STREAM_IMAGE))
    record = pool[int(rng.integers(len(pool)))]
    scene = _load_scene_background(cache.root_url, record.model_dump_json())
    return record, compose_image(scene, gallery, cfg.classes, cfg.compose, rng)


def _score(cfg: BuildConfig, record: BackgroundRecord, composite: Composite, cache: Store) -> QualityScore:
    scene = _load_scene_background(cache.root_url, record.model_dump_json())
    inst = composite.instances
    expected = [scene.geometry.object_pixel_height(*i.ground_uv, i.height_m) for i in inst]
    # the paper's linear rule ignores the camera by design: do not score its scale against it
    quality = cfg.quality.model_copy(update={"scale_weight": 0.0}) if cfg.compose.scale == "linear" else cfg.quality
    return composite_quality(composite.image, [i.visible_mask for i in inst], scene.image,
                             [i.visibility for i in inst], [i.pixel_height for i in inst], expected, quality)


def compose_one(cfg: BuildConfig, index: int, split: str, backgrounds: Sequence[BackgroundRecord],
                gallery: Mapping[str, Sequence[GalleryCutout]], cache: Store) -> ComposedImage:
    """Composite ``index``: its background is drawn from its split's own backgrounds. With quality
    control, attempts under the threshold are redrawn (attempt k has its own seed) and the best kept;
    weather, if configured, is laid over the whole image last."""
    pool = [b for b in backgrounds if b.split == split]
    attempts = 1 + (cfg.quality.max_resamples if cfg.quality else 0)
    best: tuple[BackgroundRecord, Composite, QualityScore | None] | None = None
    for attempt in range(attempts):
        record, composite = _attempt(cfg, index, attempt, pool, gallery, cache)
        score = _score(cfg, record, composite, cache) if cfg.quality and composite.instances else None
        if best is None or (score is not None and best[2] is not None and score.total > best[2].total):
            best = (record, composite, score)
        if score is None or score.total >= cfg.quality.threshold:
            break
    record, composite, score = best
    condition = record.condition
    if cfg.weather.mix.get("none", 0) < sum(cfg.weather.mix.values()):
        composite, condition = _with_weather(cfg, index, record, composite, cache)
    return ComposedImage(record, composite, condition, score, attempt + 1)


def _with_weather(cfg: BuildConfig, index: int, record: BackgroundRecord, composite: Composite,
                  cache: Store) -> tuple[Composite, str]:
    from synrail.compose import weather  # imports albumentations (and torch): only when weather is on

    rng = rng_for(cfg.seed, STREAM_WEATHER, index)
    condition = weather.choose_condition(cfg.weather, rng, record.condition)
    effect = weather.weather_effect(condition, record.condition)
    if effect == "none":
        return composite, condition
    depth = None
    if effect == "fog":  # only fog thickens with distance; the depth map costs ~7 ms an image
        scene = _load_scene_background(cache.root_url, record.model_dump_json())
        depth = weather.scene_depth(scene.geometry, [(i.visible_mask, i.distance_m) for i in composite.instances])
    image = weather.apply_weather(composite.image, effect, cfg.weather, rng, depth_m=depth)
    return Composite(image=image, instances=composite.instances), condition


def annotation_rows(index: int, composite: Composite, cfg: BuildConfig) -> list[dict[str, Any]]:
    rows = []
    for k, inst in enumerate(composite.instances):
        rle = encode_rle(inst.visible_mask.full())
        bbox, area = rle_box_and_area(rle)
        rows.append({
            "image_id": image_id(index), "image_index": index, "instance": k, "class_name": inst.class_name,
            "category_id": cfg.classes.index(inst.class_name), "rle_counts": rle["counts"],
            "rle_height": rle["size"][0], "rle_width": rle["size"][1], "bbox_x": bbox[0], "bbox_y": bbox[1],
            "bbox_w": bbox[2], "bbox_h": bbox[3], "area": area, "distance_m": inst.distance_m,
            "visibility": inst.visibility, "truncated": inst.truncated, "occluded": inst.occluded,
            "height_m": inst.height_m, "ground_u": inst.ground_uv[0], "ground_v": inst.ground_uv[1],
            "source": inst.source, "cutout_id": inst.cutout_id,
        })
    return rows


def compose_chunk(cfg: BuildConfig, first: int, stop: int, backgrounds: Sequence[BackgroundRecord],
                  gallery: Sequence[GalleryRecord], cache: Store, out: Store,
                  splits: Sequence[str] | None = None) -> ChunkRecord:
    """Compose images ``first..stop-1``; write their JPEGs, YOLO labels and a Parquet chunk of rows.

    ``splits`` gives the split of each of these images; by default the build's contiguous blocks
    (an incremental version passes the splits of the videos it adds).
    """
    splits = list(splits) if splits is not None else image_splits(cfg)[first:stop]
    if len(splits) != stop - first:
        raise ValueError(f"compose_chunk {first}..{stop}: {len(splits)} splits for {stop - first} images")
    cutouts = gallery_by_class(cache, gallery)
    jpeg_params = [cv2.IMWRITE_JPEG_QUALITY, cfg.image.jpeg_quality]
    image_rows, all_annotations = [], []
    for index, split in zip(range(first, stop), splits):
        background, composite, condition, quality, attempts = compose_one(cfg, index, split, backgrounds, cutouts,
                                                                          cache)
        name = image_id(index)
        sha = out.write_bytes(f"images/{split}/{name}.jpg", encode_image(composite.image, ".jpg", jpeg_params))
        rows = annotation_rows(index, composite, cfg)
        out.write_text(f"labels/{split}/{name}.txt", "".join(
            yolo_line(r["category_id"], (r["bbox_x"], r["bbox_y"], r["bbox_w"], r["bbox_h"]),
                      cfg.image.width, cfg.image.height) + "\n" for r in rows))
        image_rows.append({
            "image_id": name, "image_index": index, "split": split, "file_name": f"images/{split}/{name}.jpg",
            "width": cfg.image.width, "height": cfg.image.height, "background_id": background.background_id,
            "condition": condition, "background_condition": background.condition,
            "track_type": background.track_type, "num_annotations": len(rows), "sha256": sha,
            "quality": quality.total if quality else None, "attempts": attempts,
        })
        all_annotations.extend(rows)
    images_blob, annotations_blob = table_bytes(image_rows), table_bytes(all_annotations, ANNOTATION_SCHEMA)
    key = sha256_bytes(images_blob + annotations_blob)
    images_path = f".synrail/chunks/{first:06d}-{stop:06d}-{key[:12]}-images.parquet"
    annotations_path = images_path.replace("-images.", "-annotations.")
    out.write_bytes(images_path, images_blob)
    out.write_bytes(annotations_path, annotations_blob)
    return ChunkRecord(first=first, stop=stop, images_path=images_path, annotations_path=annotations_path,
                       sha256=key, num_images=len(image_rows), num_annotations=len(all_annotations))


ANNOTATION_SCHEMA = pa.schema([
    ("image_id", pa.string()), ("image_index", pa.int64()), ("instance", pa.int64()), ("class_name", pa.string()),
    ("category_id", pa.int64()), ("rle_counts", pa.string()), ("rle_height", pa.int64()), ("rle_width", pa.int64()),
    ("bbox_x", pa.int64()), ("bbox_y", pa.int64()), ("bbox_w", pa.int64()), ("bbox_h", pa.int64()),
    ("area", pa.int64()), ("distance_m", pa.float64()), ("visibility", pa.float64()), ("truncated", pa.bool_()),
    ("occluded", pa.bool_()), ("height_m", pa.float64()), ("ground_u", pa.int64()), ("ground_v", pa.int64()),
    ("source", pa.string()), ("cutout_id", pa.string()),
])


def chunk_ranges(num_images: int, chunk_size: int) -> list[tuple[int, int]]:
    return [(first, min(first + chunk_size, num_images)) for first in range(0, num_images, chunk_size)]

