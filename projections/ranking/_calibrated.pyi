"""Types of the calibrated relevance kernel (``_calibrated.c``); ``calibrated.py`` is its only
caller and its reference.

Arrays must be C-contiguous (read through the buffer protocol); ``neg``, ``evidence``, ``e``
and ``pos`` are written in place.
"""

import numpy as np
import numpy.typing as npt

def logits(seq: npt.NDArray[np.int64], at: npt.NDArray[np.int64],
           lex: npt.NDArray[np.float64], cosine: npt.NDArray[np.float64],
           owner: npt.NDArray[np.int32], named: npt.NDArray[np.float64],
           wb: npt.NDArray[np.float64], wc: npt.NDArray[np.float64],
           base: npt.NDArray[np.float64], near: npt.NDArray[np.uint8], k: int, w_cb: float,
           w_cc: float, w_an: float, min_cosine: float, neg: npt.NDArray[np.float64],
           evidence: npt.NDArray[np.uint8]) -> None:
    """``neg`` gets each note's negated logit, ``evidence`` 1 where the note has evidence."""

def finish(e: npt.NDArray[np.float64], evidence: npt.NDArray[np.uint8], floor: float,
           pos: npt.NDArray[np.int64]) -> int:
    """``e`` (``exp(neg)``) becomes the probability; ``pos`` gets the positions above 0;
    returns how many. An empty ``evidence``: every note has evidence."""

def nearest(seq: npt.NDArray[np.int64], cosine: npt.NDArray[np.float64], k: int,
            min_cosine: float, out: npt.NDArray[np.int64]) -> int:
    """``out`` gets the positions (ascending) of the ``k`` largest ``cosine[seq]`` (ties with
    the k-th included) that are at least ``min_cosine``; returns how many."""

def compact(neg: npt.NDArray[np.float64], evidence: npt.NDArray[np.uint8],
            at: npt.NDArray[np.int64]) -> int:
    """``at`` gets the positions with evidence (ascending) and ``neg`` their values at its
    front; returns how many."""
