"""Types of BM25's per-note sums (``_bm25.c``); ``columns.py`` is its only caller and its
reference.

Arrays must be C-contiguous (read through the buffer protocol); ``slots`` and ``values`` are
written in place.
"""

import numpy as np
import numpy.typing as npt

def accumulate(every: npt.NDArray[np.int64], parts: npt.NDArray[np.float64], n: int,
               max_score: float, keep_zero: bool, slots: npt.NDArray[np.int64],
               values: npt.NDArray[np.float64]) -> int:
    """Sum ``parts`` per slot of ``every`` (in order); ``slots[:k]`` get the slots above 0
    (``keep_zero``: every slot given), ascending, ``values[:k]`` their sums over
    ``max_score``; returns ``k``."""
