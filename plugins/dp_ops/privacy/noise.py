"""Discrete Laplace noise from a cryptographically secure source, and its intervals.

Mechanism (used for every published count and sum):

    M(x) = x + Z,   Z ~ DiscreteLaplace(t),   P(Z = k) = (1 - a) / (1 + a) * a^|k|,
    a = exp(-epsilon / sensitivity),  k in Z.

Guarantee: if one privacy unit (a user-day, added or removed) changes the integer query
``x`` by at most ``sensitivity`` (L1), then M is ``epsilon``-differentially private with
delta = 0 for that query: P(M(x) = y) / P(M(x') = y) = a^(|y - x| - |y - x'|) <=
a^-|x - x'| <= exp(epsilon). Counts are integers; real-valued sums must first be put on
an integer grid (e.g. minutes for hours) by the caller, who states the sensitivity in grid
units.

Why not floating-point Laplace: a float Laplace sample added to a float leaves low-order
bits that depend on the input, which breaks DP outright (Mironov, CCS 2012). Here both
the input and the noise are integers, so the output is an integer with the exact
discrete-Laplace law (up to the geometric sampler's rounding of probabilities, which is
data independent). Z is drawn as the difference of two i.i.d. geometric variables with
success probability 1 - a, which has exactly the law above.

Randomness: numpy's ``Generator`` over randomgen's ``AESCounter`` bit generator (AES-128
in counter mode, a CSPRNG), keyed with 128 bits from the operating system's CSPRNG
(``secrets``). A generator is never seeded from data or from a fixed seed in production;
``noise_generator(key=...)`` exists for tests only.
"""

from __future__ import annotations

import math
import secrets
from typing import Any

import numpy as np
from numpy.typing import NDArray
from randomgen import AESCounter


def noise_generator(key: int | None = None) -> np.random.Generator:
    """A numpy Generator over AES-128-CTR keyed from ``secrets`` (or ``key``, tests only)."""
    if key is None:
        key = secrets.randbits(128)
    return np.random.Generator(AESCounter(key=key))


def discrete_laplace_a(epsilon: float, sensitivity: int) -> float:
    """The distribution's ratio ``a = exp(-epsilon / sensitivity)``."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon={epsilon!r}: must be a finite number > 0")
    if sensitivity < 1:
        raise ValueError(f"sensitivity={sensitivity!r}: must be an integer >= 1")
    return math.exp(-epsilon / sensitivity)


def sample_discrete_laplace(
    size: int, *, epsilon: float, sensitivity: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """``size`` i.i.d. discrete Laplace draws for a query of L1 ``sensitivity``."""
    discrete_laplace_a(epsilon, sensitivity)  # validates the parameters
    p = -math.expm1(-epsilon / sensitivity)  # 1 - a, accurate for small epsilon
    g1 = rng.geometric(p, size)
    g2 = rng.geometric(p, size)
    return (g1 - g2).astype(np.int64)


def add_discrete_laplace(
    values: NDArray[np.int64], *, epsilon: float, sensitivity: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """Noisy copy of integer ``values`` (every cell, zeros included), epsilon-DP per cell.

    Privacy unit: one user-day. Sensitivity: ``sensitivity`` in the values' integer unit
    (L1, add/remove one user-day). Noise: discrete Laplace, a = exp(-epsilon/sensitivity).
    Assumes ``values`` were computed after contribution bounding that enforces the stated
    sensitivity; the caller accounts for composition over cells a user can touch.
    """
    values = np.asarray(values)
    if values.dtype.kind not in "iu":
        raise TypeError(f"values must be integers (got dtype {values.dtype}); put real "
                        "values on an integer grid first")
    z = sample_discrete_laplace(values.size, epsilon=epsilon, sensitivity=sensitivity, rng=rng)
    return values.astype(np.int64) + z.reshape(values.shape)


def discrete_laplace_pmf(k: NDArray[np.int64] | int, *, epsilon: float,
                         sensitivity: int) -> NDArray[np.float64]:
    """Exact probability of each integer ``k`` under the noise law (for tests and audits)."""
    a = discrete_laplace_a(epsilon, sensitivity)
    k = np.abs(np.asarray(k, dtype=np.float64))
    return (1 - a) / (1 + a) * np.power(a, k)


def discrete_laplace_tail(m: int | NDArray[np.int64], *, epsilon: float,
                          sensitivity: int) -> Any:
    """P(|Z| > m) = 2 a^(m+1) / (1 + a) for m >= 0.

    ``a^(m+1)`` is computed as ``exp(-(m+1) epsilon / sensitivity)``: raising a rounded
    ``a`` to a large power would multiply its rounding error by ``m + 1``."""
    a = discrete_laplace_a(epsilon, sensitivity)
    return 2 * np.exp(-(np.asarray(m) + 1) * epsilon / sensitivity) / (1 + a)


def discrete_laplace_margin(alpha: float, *, epsilon: float, sensitivity: int) -> int:
    """Smallest integer m >= 0 with P(|Z| > m) <= alpha: value +/- m is a (1 - alpha)
    interval for the true value. This is the exact discrete analogue of Google's DP
    library interval ``value +/- b ln(1/alpha)`` for Laplace of scale b (which it bounds
    from above up to rounding)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r}: must be in (0, 1)")
    a = discrete_laplace_a(epsilon, sensitivity)
    # 2 a^(m+1)/(1+a) <= alpha  <=>  m + 1 >= ln(alpha (1+a) / 2) / ln a
    m = math.ceil(math.log(alpha * (1 + a) / 2) / (-epsilon / sensitivity)) - 1
    m = max(m, 0)
    # guard against floating rounding at the boundary
    while discrete_laplace_tail(m, epsilon=epsilon, sensitivity=sensitivity) > alpha:
        m += 1
    while m > 0 and discrete_laplace_tail(m - 1, epsilon=epsilon,
                                          sensitivity=sensitivity) <= alpha:
        m -= 1
    return m
