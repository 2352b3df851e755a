"""Types of a term table's lookup in C (``_terms.c``); ``terms.py`` is its only caller and its
reference.

Arrays must be C-contiguous (read through the buffer protocol).
"""

import numpy as np
import numpy.typing as npt

def lookup(terms: list[str], hashes: npt.NDArray[np.int64], ids: npt.NDArray[np.int32],
           off: npt.NDArray[np.int64], buf: bytes) -> list[int]:
    """The id of each of ``terms`` among the sealed terms (-1: none): ``hashes`` ascending,
    ``ids[i]`` the id of the term hashed to ``hashes[i]``, the term of id ``t`` the bytes
    ``buf[off[t]:off[t + 1] - 1]``."""
