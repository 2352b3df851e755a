"""Fitting the calibrated relevance's coefficients: L2-regularised logistic regression by
Newton's method (iteratively reweighted least squares). Pure numpy, deterministic: used by
``hivemind calibrate`` and ``bench/fit_calibration.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.calibrated import FEATURES
from hivemind_memory.projections.ranking.config import Calibration

FloatArray = npt.NDArray[np.float64]

L2 = 1e-5
"""Ridge penalty on the mean log-loss (the intercept is not penalised). Chosen on LoCoMo's
development half with conversations held out (``bench/fit_calibration.py`` prints the grid)."""
MAX_ITERATIONS = 100


def fit_logistic(x: FloatArray, y: FloatArray, l2: float = L2,
                 weights: FloatArray | None = None,
                 offset: FloatArray | None = None) -> FloatArray:
    """Coefficients (one per column of ``x``, then the intercept) minimising the weighted
    mean log-loss plus ``l2 / 2`` times the squared coefficients. ``y`` in {0, 1};
    ``offset``: a fixed term of each row's logit (``calibrated.prior``)."""
    n, k = x.shape
    off = np.zeros(n) if offset is None else np.asarray(offset, np.float64)
    xb = np.hstack([x, np.ones((n, 1))])
    w = np.ones(n) if weights is None else np.asarray(weights, np.float64)
    w = w / w.sum()
    ridge = np.full(k + 1, l2)
    ridge[-1] = 0.0
    beta = np.zeros(k + 1)
    # start at the base rate, so the first steps are sane with rare positives
    rate = float(np.clip((w * y).sum(), 1e-9, 1 - 1e-9))
    beta[-1] = math.log(rate / (1 - rate)) - float((w * off).sum())
    def loss(b: FloatArray) -> float:
        z = xb @ b + off  # log(1 + e^z) - y z, computed without overflow
        return float((w * (np.logaddexp(0.0, z) - y * z)).sum() + 0.5 * (ridge * b * b).sum())

    current = loss(beta)
    for _ in range(MAX_ITERATIONS):
        p = 1.0 / (1.0 + np.exp(-(xb @ beta + off)))
        grad = xb.T @ (w * (p - y)) + ridge * beta
        hess = (xb * (w * p * (1 - p))[:, None]).T @ xb + np.diag(ridge)
        hess += np.eye(k + 1) * 1e-12
        step = np.linalg.solve(hess, grad)
        for _ in range(40):  # damped: halve the step until the loss goes down
            trial = beta - step
            got = loss(trial)
            if got <= current:
                break
            step = step / 2
        beta, improved = trial, current - got
        current = got
        if float(np.abs(step).max()) < 1e-10 or improved < 1e-15:
            break
    return beta


def calibration_of(beta: Sequence[float], base: Calibration) -> Calibration:
    """``base`` with the fitted coefficients (``FEATURES`` order, then the intercept)."""
    values = {name: float(v) for name, v in zip(FEATURES, beta[:-1], strict=True)}
    return msgspec.structs.replace(base, intercept=float(beta[-1]), **values)
