"""The gallery stage: obstacle cutouts as records, procedural (rendered with exact alpha) or from
real sources (dataset adapters or diffusion images, cut out by the segmenter).

One ``prepare_gallery_source`` call handles one configured real source. Masks go through the
Parquet mask cache and diffusion
images through the diffusion cache, both in the build's cache store, so a rerun makes no model
call. The segmenter and the diffusion pipeline load once per process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import cv2
import numpy as np

from synrail.config import (
    BuildConfig,
    CocoSource,
    DiffusionSource,
    PennFudanSource,
    ProceduralSource,
    RgbaFolderSource,
    RockFolderSource,
)
from synrail.errors import InputError
from synrail.randomness import Stream, procedural_obstacle_rng, rng_for
from synrail.records import GalleryRecord, GallerySourceResult, QuarantineRecord, SkipRow
from synrail.segment.cache import MaskCache
from synrail.segment.loader import load_segmenter
from synrail.sources.cutouts import ExtractedCutout, extract_cutouts
from synrail.sources.diffusion import DiffusionCache, expand_prompts, load_generator, subject_prompt
from synrail.sources.frame_filters import UltralyticsDetector
from synrail.sources.gallery_sources import (
    ObstacleCandidate,
    Skipped,
    dtd_texture_loader,
    read_coco_instances,
    read_dtd_textures,
    read_pennfudan,
    read_rgba_folder,
    read_rock_folders,
)
from synrail.sources.procedural_obstacles import SIZE_PRIORS_M, render_cutout
from synrail.storage.codecs import encode_image
from synrail.storage.store import Store, sha256_bytes

# Both gallery stages: the procedural one reads seed, classes, gallery; a real source also segment.
CONFIG_SECTIONS = ("seed", "classes", "gallery", "inputs")
SOURCE_CONFIG_SECTIONS = ("seed", "classes", "gallery", "segment", "inputs")
RealSource = CocoSource | PennFudanSource | RockFolderSource | RgbaFolderSource | DiffusionSource


# -- procedural obstacles ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _dtd_textures(root: str, max_pixels: int) -> Callable[[np.random.Generator], np.ndarray]:
    return dtd_texture_loader(read_dtd_textures(root), max_pixels=max_pixels)


def prepare_gallery_item(cfg: BuildConfig, class_name: str, index: int, cache: Store) -> GalleryRecord:
    """Render one procedural obstacle cutout (RGBA, exact alpha) with its physical size.

    Args:
        cfg: the build config (reads ``CONFIG_SECTIONS``).
        class_name: one of ``cfg.classes``.
        index: the cutout's index within its class.
        cache: the build's cache store; the PNG is written there.

    Returns:
        The cutout's record.
    """
    rng = procedural_obstacle_rng(cfg.seed, cfg.classes.index(class_name), index)
    texture = None
    if class_name == "unseen_obstacle" and not cfg.gallery.random_texture:  # ablation: one flat colour
        texture = np.full((8, 8, 3), rng.integers(40, 220, 3), dtype=np.uint8)
    elif class_name == "unseen_obstacle" and cfg.gallery.dtd_root:  # the paper's DTD-filled random polygons
        texture = _dtd_textures(cfg.gallery.dtd_root, cfg.inputs.max_image_pixels)(rng)
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
    """All ``gallery.per_class`` procedural cutouts of one class (a few ms each: one task for the lot).

    Args:
        cfg: the build config (reads ``CONFIG_SECTIONS``).
        class_name: one of ``cfg.classes``.
        cache: the build's cache store.

    Returns:
        The class's cutout records, in index order.
    """
    return [prepare_gallery_item(cfg, class_name, i, cache) for i in range(cfg.gallery.per_class)]


def procedural_classes(cfg: BuildConfig, source: ProceduralSource) -> list[str]:
    """The classes a procedural gallery source renders (all of ``cfg.classes`` unless it names some).

    Args:
        cfg: the build config (``classes``).
        source: the procedural gallery source.

    Returns:
        The class names, in the order of ``cfg.classes``.
    """
    return [c for c in cfg.classes if source.classes is None or c in source.classes]


def prepare_gallery(cfg: BuildConfig, cache: Store) -> list[GalleryRecord]:
    """The procedural gallery of every class (the benchmark's fixed input).

    Args:
        cfg: the build config.
        cache: the build's cache, where the cutouts are written.

    Returns:
        The cutout records of every class, class by class.
    """
    return [record for name in cfg.classes for record in prepare_gallery_class(cfg, name, cache)]


# -- real sources -----------------------------------------------------------------------------------


def quarantined_files(skipped: list[Skipped]) -> list[QuarantineRecord]:
    """One row per file that could not be read safely (a file may have skipped several instances)."""
    seen: dict[str, str] = {}
    for row in skipped:
        if row.url is not None:
            seen.setdefault(row.url, row.reason)
    return [QuarantineRecord(url=url, reason=reason) for url, reason in seen.items()]


def _first(candidates: list[ObstacleCandidate], limit: int | None) -> list[ObstacleCandidate]:
    """A deterministic subset: the first ``limit`` by instance key."""
    ordered = sorted(candidates, key=lambda c: c.instance_key)
    return ordered if limit is None else ordered[:limit]


def dataset_candidates(source: RealSource, max_pixels: int) -> tuple[list[ObstacleCandidate], list[Skipped]]:
    """Candidates of a dataset source in its real on-disk layout; images over ``max_pixels`` (declared)
    are skipped unread.

    Args:
        source: a COCO, PennFudan, rock-folder or RGBA-folder source.
        max_pixels: the largest image (width times height) that is decoded.

    Returns:
        The candidates (at most ``max_items`` where the source sets it) and the skipped items with their reasons.

    Raises:
        TypeError: ``source`` is not a dataset source.
    """
    if isinstance(source, CocoSource):
        found, skipped = read_coco_instances(source.annotations, source.images, source.class_map,
                                             min_area_px=source.min_area_px, max_overlap=source.max_overlap,
                                             source_name=source.name, mask=source.mask,
                                             category_heights_m=source.heights_m)
        return _first(found, source.max_items), skipped
    if isinstance(source, PennFudanSource):
        found, skipped = read_pennfudan(source.root, max_pixels=max_pixels)
        return _first(found, source.max_items), skipped
    if isinstance(source, RockFolderSource):
        detector = (UltralyticsDetector(source.detector_weights, classes_to_reject=source.detector_classes)
                    if source.detector_weights else None)
        found, skipped = read_rock_folders(source.root, class_name=source.class_name, detector=detector,
                                           max_pixels=max_pixels)
        return _first(found, source.max_items), skipped
    if isinstance(source, RgbaFolderSource):
        return read_rgba_folder(source.root, source.class_name, source.height_m, max_pixels=max_pixels)
    raise TypeError(f"not a dataset source: {source.type}")


def diffusion_candidates(cfg: BuildConfig, source: DiffusionSource, cache: Store) -> list[ObstacleCandidate]:
    """Generate (or find cached) images for every class with a prompt template; box each subject.

    Args:
        cfg: the build config (``seed``, ``classes``).
        source: the diffusion source: its model and prompt templates.
        cache: the build's cache, where generated images are kept.

    Returns:
        One candidate per generated image, its prompt the subject's box.
    """
    generator = load_generator(source.model)
    templates = source.prompts.all_templates()
    classes = [c for c in cfg.classes if c in templates]
    specs = [spec for c in classes for spec in expand_prompts(
        c, source.prompts.per_class, source.prompts, rng_for(cfg.seed, Stream.DIFFUSION_PROMPTS, cfg.classes.index(c)))]
    candidates = []
    for image in DiffusionCache(cache).generate_cached(generator, specs, source.model):
        pixels = cv2.imdecode(np.frombuffer(cache.read_bytes(image.path), np.uint8), cv2.IMREAD_COLOR)
        provenance = json.dumps({"model": generator.identity, "prompt": image.spec.text, "seed": image.spec.seed})
        candidates.append(ObstacleCandidate(
            image_path=cache.url(image.path), class_name=image.spec.class_name, source=f"diffusion:{provenance}",
            instance_key=f"diffusion:{image.key}", prompt=subject_prompt(pixels), mask_path=None, mask_value=None,
            height_m_range=SIZE_PRIORS_M[image.spec.class_name]))
    return candidates


def gallery_record(cfg: BuildConfig, cutout: ExtractedCutout) -> GalleryRecord:
    """A cutout's record, its physical height drawn from its size prior (seeded by its content).

    Args:
        cfg: the build config (``seed``).
        cutout: the extracted cutout.

    Returns:
        The cutout's gallery record.
    """
    rng = rng_for(cfg.seed, Stream.GALLERY, int(cutout.sha256[:12], 16))
    return GalleryRecord(
        cutout_id=cutout.cutout_id, class_name=cutout.class_name, source=cutout.source, path=cutout.path,
        sha256=cutout.sha256, height_m=float(rng.uniform(*cutout.height_m_range)), width_px=cutout.width_px,
        height_px=cutout.height_px, mask_px=cutout.mask_px, mask_score=cutout.mask_score,
        source_image=cutout.image_path, source_box=cutout.source_box, mask_source=cutout.mask_source,
        height_m_range=cutout.height_m_range)


def prepare_gallery_source(cfg: BuildConfig, source_index: int, cache: Store) -> GallerySourceResult:
    """Cut out every usable obstacle of one real gallery source.

    Args:
        cfg: the build config (reads ``SOURCE_CONFIG_SECTIONS``).
        source_index: the source's position in ``cfg.gallery.sources``.
        cache: the build's cache store (cutouts, the mask cache, the diffusion cache).

    Returns:
        The cutout records and every candidate left out, with its reason.
    """
    source = cfg.gallery.sources[source_index]
    max_pixels = cfg.inputs.max_image_pixels
    if isinstance(source, DiffusionSource):
        candidates, skipped = diffusion_candidates(cfg, source, cache), []
    else:
        try:
            candidates, skipped = dataset_candidates(source, max_pixels)
        except ValueError as exc:  # the whole source is unusable: a missing folder, a malformed annotation file
            raise InputError(f"gallery.sources[{source_index}] ({source.type}): {exc}") from exc
    seg = cfg.segment
    segmenter = load_segmenter(seg.backend, seg.checkpoint, seg.model_type, seg.device)
    cutouts, rejected = extract_cutouts(candidates, segmenter, MaskCache(cache), cache, min_score=seg.min_score,
                                        min_area_px=seg.min_area_px, max_pixels=max_pixels)
    every_skip = [*skipped, *rejected]
    return GallerySourceResult(
        records=[gallery_record(cfg, c) for c in cutouts],
        skipped=[SkipRow(source=source.type, instance_key=s.instance_key, reason=s.reason) for s in every_skip],
        quarantine=quarantined_files(every_skip))


def needs_gpu(cfg: BuildConfig, source_index: int) -> bool:
    """Whether this source's work is model inference that belongs on a GPU worker.

    Args:
        cfg: the build config (``gallery.sources``, ``segment``).
        source_index: the source's index in ``gallery.sources``.

    Returns:
        True for a diffusion source, or for any real source when SAM segments it.
    """
    source = cfg.gallery.sources[source_index]
    uses_sam = cfg.segment.backend == "sam" or (cfg.segment.backend == "auto" and cfg.segment.checkpoint)
    return isinstance(source, DiffusionSource) or bool(uses_sam)

