"""A cheap 84x84 grayscale egocentric picture for the symbolic backend: not a rendering of the
house but a schematic camera view (docs/housekeep.md) that keeps the pixel input informative."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

SIZE = 84
CEILING, FLOOR, CROSSHAIR = 30, 70, 255


@dataclass(frozen=True)
class Sprite:
    """One visible thing: angles in degrees (bearing > 0 = to the left, elevation relative to
    the horizon), angular width/height in degrees, distance in metres for the drawing order."""

    bearing: float
    elevation: float
    width: float
    height: float
    distance: float
    shade: int


def shade(category: str, is_object: bool) -> int:
    """Grey level of a category: objects 180-250, receptacles 95-165 (stable across runs)."""
    step = zlib.crc32(category.encode("utf-8")) % 8
    return (180 if is_object else 95) + 10 * step


def render(sprites: list[Sprite], pitch: float, hfov: float,
           held_shade: int | None = None) -> np.ndarray:
    """The picture for a camera pitched ``pitch`` degrees with field of view ``hfov``."""
    scale = SIZE / hfov  # pixels per degree, both axes
    image = np.full((SIZE, SIZE), CEILING, dtype=np.uint8)
    horizon = round(SIZE / 2 + pitch * scale)
    image[max(0, min(SIZE, horizon)):, :] = FLOOR
    for s in sorted(sprites, key=lambda s: -s.distance):
        cx = SIZE / 2 - s.bearing * scale
        cy = SIZE / 2 - (s.elevation - pitch) * scale
        half_w = max(0.5, s.width * scale / 2)
        half_h = max(0.5, s.height * scale / 2)
        x0, x1 = int(max(0, cx - half_w)), int(min(SIZE, cx + half_w + 0.5))
        y0, y1 = int(max(0, cy - half_h)), int(min(SIZE, cy + half_h + 0.5))
        if x0 < x1 and y0 < y1:
            image[y0:y1, x0:x1] = s.shade
    mid = SIZE // 2
    image[mid, mid - 2:mid + 3] = CROSSHAIR
    image[mid - 2:mid + 3, mid] = CROSSHAIR
    if held_shade is not None:
        image[SIZE - 8:SIZE - 2, mid - 10:mid + 10] = held_shade
    return np.repeat(image[:, :, None], 3, axis=2)
