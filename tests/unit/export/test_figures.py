import numpy as np

from synrail.export.coco import encode_rle
from synrail.export.figures import AREA_BGR, draw_refusal, draw_track_area, strip, track_area_strip
from synrail.records import BackgroundRecord


def _green(image: np.ndarray) -> np.ndarray:
    return (np.abs(image.astype(int) - AREA_BGR).max(axis=2) < 60) | (
        (image[:, :, 1].astype(int) - image[:, :, 2]) > 40)


def test_the_track_area_is_drawn_where_the_mask_is_and_nowhere_else():
    image = np.full((120, 200, 3), 100, np.uint8)
    mask = np.zeros((120, 200), bool)
    mask[60:, 80:120] = True
    tile = draw_track_area(image, mask, width=200)
    green = _green(tile)
    assert green[70:, 85:115].all()  # inside the area
    assert not green[:50].any() and not green[:, :70].any() and not green[:, 130:].any()  # outside it


def test_a_refused_frame_is_darkened_and_framed_and_strips_put_tiles_side_by_side():
    image = np.full((100, 160, 3), 200, np.uint8)
    tile = draw_refusal(image, "no track: rail pair not supported by the image", width=160)
    assert tile.shape == (100, 160, 3) and tile[50, 80].mean() < 110  # darkened
    assert tuple(tile[0, 80]) != tuple(tile[50, 80])  # the red frame
    assert strip([tile, tile], gap=6).shape == (100, 326, 3)


def _record(source: str, index: int, mask: np.ndarray) -> BackgroundRecord:
    from synrail.rail.geometry import CameraGeometry

    geometry = CameraGeometry.from_fov(64, 48, 60, 2.5, 3.0)
    return BackgroundRecord(
        background_id=f"b{index}", index=index, split="train", source=source, source_url="", frame_index=index,
        path=f"bg/{index}.png", sha256="0" * 64, width=64, height=48, track_type="ballasted", condition="normal",
        geometry=geometry, fog_beta=0.0, airlight_bgr=(0.0, 0.0, 0.0), illumination_bgr=(1.0, 1.0, 1.0),
        sensor_noise=0.0, rail_area=encode_rle(mask), rail_area_px=int(mask.sum()))


def test_the_card_strip_draws_real_backgrounds_only_with_their_stored_area():
    mask = np.zeros((48, 64), bool)
    mask[24:, 24:40] = True
    records = [_record("procedural/ballasted", 0, mask), *(_record("frames:run0", i, mask) for i in range(1, 7))]
    read = []
    image = track_area_strip(records, lambda path: read.append(path) or np.full((48, 64, 3), 90, np.uint8),
                             count=3, width=64)
    assert read == ["bg/1.png", "bg/3.png", "bg/6.png"]  # spread over the real ones; the procedural one left out
    assert image.shape == (48, 3 * 64 + 2 * 6, 3)
    assert _green(image)[40:, 28:36].all() and not _green(image)[:, :16].any()
    assert track_area_strip(records[:1], lambda path: None) is None
