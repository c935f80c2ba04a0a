"""Pixel preprocessing: 64x64 RGB renders -> 84x84 grayscale frames, stacked."""

from __future__ import annotations

from collections import deque

import numpy as np
from PIL import Image

FRAME_SIZE = 84


def to_gray84(rgb: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [84, 84] (ITU-R 601 luma, bilinear resize)."""
    image = Image.fromarray(rgb).convert("L").resize((FRAME_SIZE, FRAME_SIZE), Image.BILINEAR)
    return np.asarray(image, dtype=np.uint8)


def paper_gray84(rgb: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [84, 84] as the original: the mean of the RGB channels,
    resized linearly as floats, then cast (truncated) to uint8."""
    gray = Image.fromarray(rgb.mean(axis=-1, dtype=np.float32), mode="F")
    resized = np.asarray(gray.resize((FRAME_SIZE, FRAME_SIZE), Image.BILINEAR))
    return resized.astype(np.uint8)


class FrameStack:
    """The last ``k`` frames; at an episode start the first frame fills the stack."""

    def __init__(self, k: int):
        self.k = k
        self._frames: deque[np.ndarray] = deque(maxlen=k)

    def reset(self, frame: np.ndarray) -> np.ndarray:
        self._frames.clear()
        self._frames.extend([frame] * self.k)
        return self.stacked()

    def push(self, frame: np.ndarray) -> np.ndarray:
        self._frames.append(frame)
        return self.stacked()

    def stacked(self) -> np.ndarray:
        return np.stack(self._frames)
