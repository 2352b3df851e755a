"""Types of the exact cosines over int8 vectors (``_vectors.c``); ``vectors.py`` is its only
caller and its reference.

Arrays must be C-contiguous (read through the buffer protocol); ``out`` is written in place.
"""

import numpy as np
import numpy.typing as npt

def cosines(mat: npt.NDArray[np.int8], dim: int, slots: npt.NDArray[np.int64],
            q: npt.NDArray[np.int16], qn: npt.NDArray[np.float64],
            norm: npt.NDArray[np.float64], out: npt.NDArray[np.float64]) -> None:
    """``out[j * m + i]``: the cosine of query ``j`` (``q``'s row ``j``, norm ``qn[j]``) with
    row ``slots[i]`` of ``mat`` (rows ``0..m-1`` when ``slots`` is empty; ``m`` is
    ``len(out) / len(qn)``): the exact integer dot product over ``qn[j] * norm[row]``, 0
    where that is not above 0."""
