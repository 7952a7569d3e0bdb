r"""The reliability rule of the symptoms dataset: an interval for the true ratio a / b.

Everything here is post-processing of noisy counts and public parameters (epsilons,
sensitivities, the configured probability and tolerance), so it costs no privacy budget.

Noise
-----
For a region-day, ``A = a + Z_A`` is the noisy number of users searching a symptom and
``B = b + Z_B`` the noisy number of users with any search; ``Z_A`` and ``Z_B`` are
independent discrete Laplace draws (``dp_ops.privacy.noise``: ``P(Z = k) ~ alpha^|k|`` with
``alpha = exp(-epsilon / sensitivity)``). A weekly ``A_w`` (``B_w``) is the sum of the
``n`` daily noisy values of Monday..Sunday, so its noise is the sum of ``n`` i.i.d.
discrete Laplace draws (a re-noised day has the same law, so this stays true). Its law is
computed exactly (up to a truncated tail mass below 1e-15, counted against us) by
numerical convolution, and ``sum_noise_margin`` returns the smallest integer ``m`` with
``P(|Z_1 + ... + Z_n| <= m) >= confidence``.

Derivation of the interval (the rule's guarantee)
-------------------------------------------------
Let ``p`` be ``reliability_probability`` (0.5) and ``t`` the tolerance (0.25). Take
``gamma = sqrt(p)`` and the margins ``m_A``, ``m_B`` with

    P(|Z_A| <= m_A) >= gamma,    P(|Z_B| <= m_B) >= gamma.

The noises are independent, so ``P(|Z_A| <= m_A and |Z_B| <= m_B) >= gamma^2 = p``.
When both hold and ``B - m_B > 0``, we have ``a in [A - m_A, A + m_A]``, ``a >= 0``
(a count) and ``b in [B - m_B, B + m_B]`` with ``b > 0``; ``a / b`` is increasing in
``a`` and decreasing in ``b`` on that box, so

    l = max(A - m_A, 0) / (B + m_B)  <=  a / b  <=  (A + m_A) / (B - m_B) = r.

Hence, for every fixed true ``(a, b)``, ``P(a / b not in [l, r]) <= 1 - p`` (when
``B - m_B <= 0`` no interval is formed and nothing is published). With ``R = A / B``, a
value is *reliable* (published) only if ``R > 0`` and ``[l, r]`` lies inside
``[(1 - t) R, (1 + t) R]``. On the event that the interval holds, a published value is
therefore within ``t R`` of the true ratio, so

    P(published and |a / b - R| > t R) <= P(a / b not in [l, r]) <= 1 - p = 50%,

which is the rule of docs/design.md, Symptoms dataset: the true ratio lies within +/-25% of
A / B with probability at least 50%. This mirrors Google's differential privacy library:
its mechanisms give
confidence intervals from the known noise law (``NoiseConfidenceInterval``), and its
bounded mean (``algorithms/internal/bounded-mean-ci.cc``) bounds a ratio of a noisy sum
and a noisy count from their two intervals, with confidence levels whose product is the
target, exactly as here. Unlike that code, which searches the split of the levels per
value, the split here is fixed (``sqrt(p)`` each) before any data is seen.

The bound is conservative: the joint event is only a sufficient condition for the ratio
to be covered (the ratio is often covered when one count is off), the margins are
integers rounded up so each holds with probability at least ``gamma``, and the lower end
uses ``a >= 0``. ``tests/unit/reports/symptoms/test_symptoms_reliability.py`` measures the actual
coverage by simulation. The rule only reads noisy values and public parameters, so it is
post-processing of the differentially private release.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from dp_ops.privacy.noise import discrete_laplace_a, discrete_laplace_margin
from dp_ops.reports.symptoms.config import SymptomsConfig

# The law of a sum of n draws is computed on a truncated support: each draw's pmf is cut
# where its two-sided tail is below TRUNCATED_MASS / n, so at most TRUNCATED_MASS of the
# sum's mass is missing, and that is added to every computed tail (conservative).
TRUNCATED_MASS = 1e-15
# Confidences closer to 1 than this cannot be told apart from the truncation.
MAX_CONFIDENCE = 1 - 1e-9


@lru_cache(maxsize=64)
def _sum_abs_tail(epsilon: float, sensitivity: int, n: int) -> NDArray[np.float64]:
    """``tail[m]`` = an upper bound on ``P(|Z_1 + ... + Z_n| > m)`` for ``m = 0, 1, ...``
    (exact up to the truncated mass, which is added; floating rounding aside)."""
    a = discrete_laplace_a(epsilon, sensitivity)
    # k with P(|Z| > k) <= TRUNCATED_MASS / n (discrete_laplace_margin uses the exact tail)
    k = discrete_laplace_margin(TRUNCATED_MASS / n, epsilon=epsilon, sensitivity=sensitivity)
    support = np.arange(-k, k + 1)
    # a^|j| as exp(-|j| epsilon / sensitivity): no rounding error growing with |j|
    pmf = (1 - a) / (1 + a) * np.exp(-np.abs(support) * (epsilon / sensitivity))
    # n-fold convolution by repeated squaring (fewer, larger products than n - 1 steps)
    result: NDArray[np.float64] | None = None
    power, rest = pmf, n
    while rest:
        if rest & 1:
            result = power if result is None else np.convolve(result, power)
        rest >>= 1
        if rest:
            power = np.convolve(power, power)
    assert result is not None
    centre = n * k  # index of the value 0
    # law of |S|: P(|S| = 0), then P(S = j) + P(S = -j) for j >= 1
    abs_pmf = result[centre:].copy()
    abs_pmf[1:] += result[centre - 1::-1]
    # tails summed from the far end (small terms first, so they keep their precision)
    tail = np.cumsum(abs_pmf[::-1])[::-1]
    tail = np.append(tail[1:], 0.0)  # tail[m] = P(|S| > m) on the truncated support
    tail = tail + TRUNCATED_MASS
    tail.setflags(write=False)
    return tail


def sum_noise_tail(m: int, *, epsilon: float, sensitivity: int, n: int = 1) -> float:
    """``P(|Z_1 + ... + Z_n| > m)`` for i.i.d. discrete Laplace ``Z_i``, from the exact law
    of the sum (numerical convolution; the truncated mass, at most 1e-15, is added, so the
    value is never below the true tail except by floating rounding)."""
    if n < 1:
        raise ValueError(f"n={n!r}: must be an integer >= 1")
    if m < 0:
        return 1.0
    tail = _sum_abs_tail(float(epsilon), int(sensitivity), int(n))
    return float(tail[m]) if m < tail.size else TRUNCATED_MASS


def sum_noise_margin(confidence: float, *, epsilon: float, sensitivity: int,
                     n: int = 1) -> int:
    """Smallest integer ``m >= 0`` with ``P(|Z_1 + ... + Z_n| <= m) >= confidence``.

    ``Z_i`` are i.i.d. discrete Laplace for a query of L1 ``sensitivity`` at ``epsilon``
    (``dp_ops.privacy.noise``): the noise of a sum of ``n`` noisy daily cells. For ``n = 1`` this
    is ``discrete_laplace_margin(1 - confidence, ...)`` (closed form). For ``n > 1`` the
    law of the sum is computed by convolution (cached per parameter set); the truncated
    tail mass is counted as outside the margin, so the margin is never too small.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r}: must be in (0, 1)")
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n={n!r}: must be an integer >= 1")
    if n == 1:
        return discrete_laplace_margin(1 - confidence, epsilon=epsilon,
                                       sensitivity=sensitivity)
    if confidence > MAX_CONFIDENCE:
        raise ValueError(f"confidence={confidence!r}: must be <= {MAX_CONFIDENCE} for "
                         "sums (the law is truncated at a 1e-15 tail)")
    tail = _sum_abs_tail(float(epsilon), int(sensitivity), int(n))
    # tail is non-increasing and ends at TRUNCATED_MASS < 1 - confidence
    return int(np.argmax(tail <= 1 - confidence))


def ratio_interval(a_noisy: ArrayLike, b_noisy: ArrayLike, a_margin: ArrayLike,
                   b_margin: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Interval ``[l, r]`` for the true ratio ``a / b`` (arguments broadcast together).

    ``l = max(A - m_A, 0) / (B + m_B)`` and ``r = (A + m_A) / (B - m_B)``; both are NaN
    where ``B - m_B <= 0`` (no bound on ``b`` away from 0). If ``|A - a| <= m_A`` and
    ``|B - b| <= m_B`` then ``l <= a / b <= r`` (see the module docstring).
    """
    a, b, ma, mb = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64)
                                         for x in (a_noisy, b_noisy, a_margin, b_margin)))
    if np.any(ma < 0) or np.any(mb < 0):
        raise ValueError("margins must be >= 0")
    ok = (b - mb) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.where(ok, np.maximum(a - ma, 0.0) / (b + mb), np.nan)
        upper = np.where(ok, (a + ma) / (b - mb), np.nan)
    return lower, upper


def is_reliable(a_noisy: ArrayLike, b_noisy: ArrayLike, a_margin: ArrayLike,
                b_margin: ArrayLike, tolerance: float) -> NDArray[np.bool_]:
    """Whether each noisy ratio ``R = A / B`` may be published (arguments broadcast).

    True iff ``B - m_B > 0``, ``R > 0`` and ``[l, r]`` (``ratio_interval``) lies inside
    ``[(1 - tolerance) R, (1 + tolerance) R]``. With margins at confidence
    ``sqrt(p)`` each, ``P(reliable and |a / b - R| > tolerance R) <= 1 - p`` for every
    true ``(a, b)``. Never true where ``A <= 0`` or ``B - m_B <= 0``.
    """
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance={tolerance!r}: must be in (0, 1)")
    lower, upper = ratio_interval(a_noisy, b_noisy, a_margin, b_margin)
    a, b = np.broadcast_arrays(np.asarray(a_noisy, dtype=np.float64),
                               np.asarray(b_noisy, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, a / b, np.nan)
        # NaN (no interval, or B <= 0) compares False everywhere below
        reliable = ((ratio > 0) & (lower >= (1 - tolerance) * ratio)
                    & (upper <= (1 + tolerance) * ratio))
    return np.broadcast_to(reliable, lower.shape).copy()


def reliability(a_noisy: ArrayLike, b_noisy: ArrayLike, *, a_epsilon: float,
                a_sensitivity: int, b_epsilon: float, b_sensitivity: int,
                n_days: int | ArrayLike, cfg: SymptomsConfig) -> pd.DataFrame:
    """Ratio, interval and verdict for noisy ``A`` (sums of ``n_days`` daily cells at
    ``a_epsilon``/``a_sensitivity``) and ``B`` (likewise at ``b_epsilon``/``b_sensitivity``).

    Margins are ``sum_noise_margin(cfg.component_confidence, ..., n)`` for each distinct
    ``n`` in ``n_days`` (an int, or an integer array aligned with the values), so that the
    rule holds at ``cfg.reliability_probability`` with ``cfg.reliability_tolerance``.
    Returns columns ``ratio`` (``A / B``, NaN where ``B <= 0``), ``lower``, ``upper``,
    ``reliable``, ``a_margin``, ``b_margin``; the index is ``a_noisy``'s if it is a
    Series, else 0..n-1.
    """
    a = np.asarray(a_noisy, dtype=np.float64)
    b = np.asarray(b_noisy, dtype=np.float64)
    n = np.asarray(n_days)
    a, b, n = np.broadcast_arrays(np.atleast_1d(a), np.atleast_1d(b), np.atleast_1d(n))
    if n.dtype.kind not in "iu" or np.any(n < 1):
        raise ValueError(f"n_days: must be integers >= 1 (got {np.unique(n)[:5]!r})")
    distinct, inverse = np.unique(n, return_inverse=True)
    confidence = cfg.component_confidence
    a_margins = np.array([sum_noise_margin(confidence, epsilon=a_epsilon,
                                           sensitivity=a_sensitivity, n=int(k))
                          for k in distinct], dtype=np.int64)
    b_margins = np.array([sum_noise_margin(confidence, epsilon=b_epsilon,
                                           sensitivity=b_sensitivity, n=int(k))
                          for k in distinct], dtype=np.int64)
    m_a = a_margins[inverse.reshape(n.shape)]
    m_b = b_margins[inverse.reshape(n.shape)]
    lower, upper = ratio_interval(a, b, m_a, m_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, a / b, np.nan)
    index = a_noisy.index if isinstance(a_noisy, pd.Series) else None
    return pd.DataFrame({
        "ratio": ratio,
        "lower": lower,
        "upper": upper,
        "reliable": is_reliable(a, b, m_a, m_b, cfg.reliability_tolerance),
        "a_margin": m_a,
        "b_margin": m_b,
    }, index=index)

