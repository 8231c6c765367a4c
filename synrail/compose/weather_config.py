"""Weather settings, apart from the effects themselves so that reading a config does not import
albumentations (which imports torch: seconds per process)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

Range = tuple[float, float]
Condition = Literal["none", "fog", "rain", "snow", "dark", "glare"]
WEATHER_CONDITIONS: tuple[str, ...] = ("fog", "rain", "snow", "dark", "glare")
# Background tags (procedural or from video sidecars) that already are adverse weather or light.
ADVERSE_BACKGROUNDS = frozenset({"fog", "rain", "snow", "dark"})


class WeatherConfig(BaseModel):
    """Target mix of conditions and the strength range of each effect."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mix: dict[Condition, float] = Field(default_factory=lambda: {
        "none": 0.45, "fog": 0.15, "rain": 0.1, "snow": 0.08, "dark": 0.15, "glare": 0.07})
    fog_visibility_m: Range = (60.0, 300.0)  # with a depth map: meteorological visibility
    fog_transmission: Range = (0.4, 0.7)  # without one: a uniform veil of this transmission
    fog_airlight: Range = (185.0, 235.0)  # grey level of the fog
    fog_patchiness: float = Field(default=0.15, ge=0, le=0.5)  # relative density variation
    rain_types: tuple[Literal["drizzle", "default", "heavy", "torrential"], ...] = ("drizzle", "default", "heavy")
    rain_slant: Range = (-0.2, 0.2)  # horizontal drift of a drop, as a share of its length
    rain_darkening: Range = (0.7, 0.9)  # brightness factor under rain clouds
    snow_cover: Range = (0.05, 0.2)  # albumentations' snow_point: how much of the scene whitens
    snow_brightness: Range = (1.3, 2.0)
    snow_flake_layers: tuple[int, int] = (1, 3)  # far (small) to near (large) flakes
    dark_exposure: Range = (0.35, 0.7)  # global light factor of a night exposure
    dark_gamma: Range = (1.8, 2.8)  # exponent > 1 darkens the shadows more than the highlights
    dark_noise_std: Range = (0.015, 0.04)  # sensor noise as a share of 255
    headlight_probability: float = Field(default=0.7, ge=0, le=1)
    headlight_gain: Range = (1.0, 2.5)  # brightening at the centre of the cone
    glare_roi: tuple[float, float, float, float] = (0.1, 0.0, 0.9, 0.35)  # x0, y0, x1, y1 as shares
    glare_radius: Range = (0.03, 0.08)  # source radius as a share of the image width

    @field_validator("mix")
    @classmethod
    def _positive_mix(cls, mix: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
            raise ValueError("mix needs non-negative weights with a positive sum")
        return mix

    @field_validator("fog_visibility_m", "fog_transmission", "fog_airlight", "rain_slant", "rain_darkening",
                     "snow_cover", "snow_brightness", "snow_flake_layers", "dark_exposure", "dark_gamma",
                     "dark_noise_std", "headlight_gain", "glare_radius")
    @classmethod
    def _ordered(cls, value: Range, info: ValidationInfo) -> Range:
        if value[0] > value[1]:
            raise ValueError(f"{info.field_name} must be [low, high], got {list(value)}")
        return value

    @field_validator("glare_roi")
    @classmethod
    def _roi_inside(cls, roi: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        x0, y0, x1, y1 = roi
        if not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1):
            raise ValueError(f"glare_roi must be shares x0 < x1, y0 < y1 in [0, 1], got {list(roi)}")
        return roi
