"""Types of the C packer (``_knapsack.c``); ``packing.py`` is its only caller and its reference.

Arrays must be C-contiguous (read through the buffer protocol); ``state`` and ``chosen`` are
written in place.
"""

import numpy as np
import numpy.typing as npt

def solve(costs: npt.NDArray[np.int64], values: npt.NDArray[np.float64], budget: int, cap: int,
          prune_from: int, window_from: int, fill_chunk: int, state: npt.NDArray[np.int8],
          scaled: npt.NDArray[np.int64]) -> int:
    """Reduce an instance: ``state`` gets 0 (out), 1 (in) or 2 (core) per item, ``scaled``
    the integer values; returns the budget left for the core, -1 when the reduction failed,
    -2 when the instance is left to the numpy code."""

def dp(costs: npt.NDArray[np.int64], values: npt.NDArray[np.int64], width: int,
       chosen: npt.NDArray[np.int8]) -> None:
    """The exact DP over a core: ``chosen`` gets 1 for each item picked."""
