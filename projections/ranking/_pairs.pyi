"""Types of the shared word counts of note pairs (``_pairs.c``); ``updates.py`` is its only
caller and its reference.

Arrays must be C-contiguous (read through the buffer protocol); ``out`` is written in place.
"""

import numpy as np
import numpy.typing as npt

def shared(ids: npt.NDArray[np.int32], off: npt.NDArray[np.int64], ii: npt.NDArray[np.int64],
           jj: npt.NDArray[np.int64], out: npt.NDArray[np.int64]) -> None:
    """``out[q]``: how many ids notes ``ii[q]`` and ``jj[q]`` both hold, note ``k``'s being
    ``ids[off[k]:off[k + 1]]`` (strictly ascending)."""
