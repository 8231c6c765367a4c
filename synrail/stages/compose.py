"""The compose stage: obstacles pasted onto backgrounds, written as JPEGs, YOLO labels and a Parquet
chunk of typed rows.

Images ``first..stop-1`` make one chunk. Image ``i`` draws from ``image_rng(seed, i)`` only, so what
it looks like never depends on chunking, scheduling or worker count.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import cv2

from synrail.compose.composite import Composite, GalleryCutout, SceneBackground, compose_image, is_monochrome
from synrail.compose.memory import tune_malloc_for_composing
from synrail.compose.placement import track_rows
from synrail.compose.quality import QualityScore, composite_quality
from synrail.config import BuildConfig
from synrail.export.coco import decode_rle, encode_window_rle, rle_box_and_area
from synrail.export.yolo import yolo_line
from synrail.randomness import Stream, image_rng, rng_for
from synrail.records import AnnotationRow, BackgroundRecord, ChunkRecord, GalleryRecord, ImageRow
from synrail.stages.splits import image_splits
from synrail.storage.codecs import decode_image, encode_image
from synrail.storage.store import Store, sha256_bytes
from synrail.storage.tables import rows_bytes, table_bytes

# Compose reads the images, the classes and everything that changes a composite; the backgrounds and
# gallery arrive as records (with their hashes), so their sections are not needed here.
CONFIG_SECTIONS = ("seed", "num_images", "classes", "image", "splits", "compose", "weather", "quality")


def image_id(index: int) -> str:
    """The file stem of image ``index``."""
    return f"{index:06d}"


def chunk_ranges(num_images: int, chunk_size: int) -> list[tuple[int, int]]:
    """``(first, stop)`` of every chunk of ``chunk_size`` images.

    Args:
        num_images: the images of the build.
        chunk_size: the images per chunk; the last chunk may be shorter.

    Returns:
        The chunks' half-open index ranges, in order.
    """
    return [(first, min(first + chunk_size, num_images)) for first in range(0, num_images, chunk_size)]


# How hard shadows are under each light: direct sun casts them, diffuse light barely does.
SHADOW_SCALE = {"normal": 1.0, "overcast": 0.35, "fog": 0.25, "dusk": 0.3, "dark": 0.15, "rain": 0.3,
                "snow": 0.4}

@functools.lru_cache(maxsize=64)
def _load_scene_background(cache_url: str, record_json: str) -> SceneBackground:
    record = BackgroundRecord.model_validate_json(record_json)
    cache = Store(cache_url)
    image = decode_image(cache.read_bytes(record.path), cv2.IMREAD_COLOR, cache.url(record.path))
    mask = decode_rle(record.rail_area)
    real_frame = record.source.startswith(("video:", "frames:"))  # rendered scenes have a colour camera
    return SceneBackground(image=image, track_mask=mask, track_rows=track_rows(mask), geometry=record.geometry,
                           fog_beta=record.fog_beta, airlight_bgr=record.airlight_bgr,
                           illumination_bgr=record.illumination_bgr, sensor_noise=record.sensor_noise,
                           light_deg=record.light_deg, shadow_scale=SHADOW_SCALE.get(record.condition, 0.6),
                           real_frame=real_frame, monochrome=real_frame and is_monochrome(image))


@functools.lru_cache(maxsize=4096)
def _load_cutout(cache_url: str, record_json: str) -> GalleryCutout:
    record = GalleryRecord.model_validate_json(record_json)
    cache = Store(cache_url)
    rgba = decode_image(cache.read_bytes(record.path), cv2.IMREAD_UNCHANGED, cache.url(record.path))
    return GalleryCutout(cutout_id=record.cutout_id, class_name=record.class_name, source=record.source,
                         rgba=rgba, height_m=record.height_m, height_m_range=record.height_m_range)


def gallery_by_class(cache: Store, gallery: Sequence[GalleryRecord]) -> dict[str, list[GalleryCutout]]:
    """The cutouts of ``gallery`` decoded from the cache, grouped by class (decoded once per process).

    Args:
        cache: the build's cache, which holds the cutouts' PNGs.
        gallery: the cutout records.

    Returns:
        The decoded cutouts per class name, in record order.
    """
    grouped: dict[str, list[GalleryCutout]] = {}
    for record in gallery:
        grouped.setdefault(record.class_name, []).append(_load_cutout(cache.root_url, record.model_dump_json()))
    return grouped


class ComposedImage(NamedTuple):
    """One composed image with what it was made from, its condition and its quality score."""

    background: BackgroundRecord
    composite: Composite
    condition: str  # the background's condition, or the weather laid over it
    quality: QualityScore | None
    attempts: int


def _attempt(cfg: BuildConfig, index: int, attempt: int, pool: Sequence[BackgroundRecord],
             gallery: Mapping[str, Sequence[GalleryCutout]], cache: Store) -> tuple[BackgroundRecord, Composite]:
    rng = image_rng(cfg.seed, index, attempt)
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
    weather, if configured, is laid over the whole image last.

    Args:
        cfg: the build config.
        index: the image index, which seeds its random streams.
        split: the image's split; only backgrounds of this split are drawn.
        backgrounds: every background record of the build.
        gallery: the decoded cutouts per class (``gallery_by_class``).
        cache: the build's cache, which holds the backgrounds.

    Returns:
        The background used, the composite, the condition (the background's or the weather's), the quality
        score (None without quality control or without obstacles) and the attempts made.
    """
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

    rng = rng_for(cfg.seed, Stream.WEATHER, index)
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


def annotation_rows(index: int, composite: Composite, cfg: BuildConfig) -> list[AnnotationRow]:
    """The label rows of composite ``index``: one per placed obstacle, its visible mask as COCO RLE.

    Args:
        index: the image index.
        composite: the composite's image and instances.
        cfg: the build config (``classes`` gives the category ids).

    Returns:
        One row per instance, in placement order.
    """
    rows = []
    for k, inst in enumerate(composite.instances):
        window = inst.visible_mask
        rle = encode_window_rle(window.top, window.left, window.mask, window.image_shape)
        bbox, area = rle_box_and_area(rle)
        rows.append(AnnotationRow(
            image_id=image_id(index), image_index=index, instance=k, class_name=inst.class_name,
            category_id=cfg.classes.index(inst.class_name), rle_counts=rle["counts"], rle_height=rle["size"][0],
            rle_width=rle["size"][1], bbox_x=bbox[0], bbox_y=bbox[1], bbox_w=bbox[2], bbox_h=bbox[3], area=area,
            distance_m=inst.distance_m, visibility=inst.visibility, truncated=inst.truncated,
            occluded=inst.occluded, height_m=inst.height_m, ground_u=inst.ground_uv[0], ground_v=inst.ground_uv[1],
            source=inst.source, cutout_id=inst.cutout_id))
    return rows


def compose_chunk(cfg: BuildConfig, first: int, stop: int, backgrounds: Sequence[BackgroundRecord],
                  gallery: Sequence[GalleryRecord], cache: Store, out: Store,
                  splits: Sequence[str] | None = None) -> ChunkRecord:
    """Compose images ``first..stop-1``; write their JPEGs, YOLO labels and a Parquet chunk of rows.

    Args:
        cfg: the build config.
        first: the first image index.
        stop: one past the last image index.
        backgrounds: every background record of the build.
        gallery: every cutout record of the build.
        cache: the build's cache, which holds backgrounds and cutouts.
        out: the output, where images, labels and the chunk tables are written.
        splits: the split of each of these images; by default the build's contiguous blocks (an
            incremental version passes the splits of the videos it adds).

    Returns:
        The chunk's record: its table paths, their joint sha256, and its image and annotation counts.

    Raises:
        ValueError: ``splits`` does not have one entry per image.
    """
    tune_malloc_for_composing()
    splits = list(splits) if splits is not None else image_splits(cfg)[first:stop]
    if len(splits) != stop - first:
        raise ValueError(f"compose_chunk {first}..{stop}: {len(splits)} splits for {stop - first} images")
    cutouts = gallery_by_class(cache, gallery)
    jpeg_params = [cv2.IMWRITE_JPEG_QUALITY, cfg.image.jpeg_quality]
    image_rows, all_annotations = [], []
    for index, split in zip(range(first, stop), splits, strict=True):
        background, composite, condition, quality, attempts = compose_one(cfg, index, split, backgrounds, cutouts,
                                                                          cache)
        name = image_id(index)
        sha = out.write_bytes(f"images/{split}/{name}.jpg", encode_image(composite.image, ".jpg", jpeg_params))
        rows = annotation_rows(index, composite, cfg)
        out.write_text(f"labels/{split}/{name}.txt", "".join(
            yolo_line(r.category_id, r.bbox, cfg.image.width, cfg.image.height) + "\n" for r in rows))
        image_rows.append(ImageRow(
            image_id=name, image_index=index, split=split, file_name=f"images/{split}/{name}.jpg",
            width=cfg.image.width, height=cfg.image.height, background_id=background.background_id,
            condition=condition, background_condition=background.condition, track_type=background.track_type,
            num_annotations=len(rows), sha256=sha, quality=quality.total if quality else None, attempts=attempts))
        all_annotations.extend(rows)
    # images: schema inferred as before (a chunk without quality control keeps its null column's bytes)
    images_blob = table_bytes([r.model_dump() for r in image_rows])
    annotations_blob = rows_bytes(all_annotations, AnnotationRow)
    key = sha256_bytes(images_blob + annotations_blob)
    images_path = f".synrail/chunks/{first:06d}-{stop:06d}-{key[:12]}-images.parquet"
    annotations_path = images_path.replace("-images.", "-annotations.")
    out.write_bytes(images_path, images_blob)
    out.write_bytes(annotations_path, annotations_blob)
    return ChunkRecord(first=first, stop=stop, images_path=images_path, annotations_path=annotations_path,
                       sha256=key, num_images=len(image_rows), num_annotations=len(all_annotations))
