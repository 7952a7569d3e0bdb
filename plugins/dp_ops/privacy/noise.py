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
the input and the noise are integers, so the output is an integer.

The sampler is exact (:class:`ExactSampler`): Z is drawn by inversion of its CDF ``F``
against a uniform ``V = (U + V') / 2^64`` built from CSPRNG words, in integer arithmetic.
``Z = min{k : V < F(k)}``. For each ``k`` of a table around 0 the threshold
``T_k = floor(2^64 F(k))`` is computed once with certified integer fixed-point arithmetic
(192-bit; both rounding directions carried, a threshold whose two bounds disagree is
recomputed at higher precision). Then ``U < T_k`` means ``V < F(k)`` and ``U > T_k``
means ``V > F(k)`` for *every* continuation ``V'``; only ``U == T_k`` (probability
``2^-64`` per draw) is undecided, and is settled exactly by drawing further words and
comparing them with the next bits of ``2^64 F(k)``, computed on demand at the needed
precision (``_exactly_below``). Beyond the table both tails are geometric and memoryless
(``P(Z = high + 1 + j | Z > high) = (1 - a) a^j``), so a draw past either end continues
with a fresh exact geometric draw from the same machinery, as often as needed: no cap,
no truncation. So every output has exactly the discrete Laplace law, and the mechanism
is epsilon-DP with delta = 0. (numpy's floating-point geometric sampler, used before,
capped |Z| near 82 at epsilon 0.44 and bent the far tail: a delta near 1e-14.)

Randomness: numpy's ``Generator`` over randomgen's ``AESCounter`` bit generator (AES-128
in counter mode, a CSPRNG), keyed with 128 bits from the operating system's CSPRNG
(``secrets``). A generator is never seeded from data or from a fixed seed in production;
``noise_generator(key=...)`` exists for tests only.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray
from randomgen import AESCounter

from dp_ops.privacy.plan import EPSILON_TOO_LARGE, MAX_EPSILON_PER_SENSITIVITY

_WORD_BITS = 64
_GUIDE_BITS = 20          # a guide table on the top 20 bits of U finds the bucket
_FIXED_BITS = 192         # fixed-point precision of the thresholds (certified)
_TABLE_TAIL_BITS = 40     # the table covers k while a^|k| >= 2^-40; beyond, the tails


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
    if epsilon / sensitivity > MAX_EPSILON_PER_SENSITIVITY:
        raise ValueError(f"epsilon={epsilon!r}, sensitivity={sensitivity!r}: epsilon / "
                         f"sensitivity {EPSILON_TOO_LARGE}")
    return math.exp(-epsilon / sensitivity)


def sample_discrete_laplace(
    size: int, *, epsilon: float, sensitivity: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """``size`` i.i.d. discrete Laplace draws for a query of L1 ``sensitivity``, with
    exactly the law of the module docstring (:class:`ExactSampler`)."""
    discrete_laplace_a(epsilon, sensitivity)  # validates the parameters
    return exact_sampler(float(epsilon), int(sensitivity)).sample(int(size), rng)


# -- the exact sampler ---------------------------------------------------------------------

def _fixed_power_bounds(y: Decimal, count: int, bits: int) -> tuple[list[int], list[int]]:
    """Integer bounds ``lo[m] <= 2^bits exp(-m y) <= hi[m]`` for ``m = 0..count``."""
    one = 1 << bits
    with localcontext() as ctx:
        ctx.prec = bits // 3 + 20  # decimal digits, beyond the fixed point's precision
        a = (-y).exp()             # correctly rounded, so within one unit of ctx.prec
        scaled = a * (Decimal(2) ** bits)
        a_lo = int(scaled.to_integral_value(rounding="ROUND_FLOOR")) - 1
        a_hi = int(scaled.to_integral_value(rounding="ROUND_CEILING")) + 1
    lo, hi = [one], [one]
    for _ in range(count):
        lo.append((lo[-1] * a_lo) >> bits)                 # rounds down
        hi.append(-((-hi[-1] * a_hi) >> bits))             # rounds up
    return lo, hi


def _cdf_scaled_bounds(k: int, lo_pow: list[int], hi_pow: list[int], a_lo: int, a_hi: int,
                       bits: int) -> tuple[int, int]:
    """Integer bounds on ``2^bits F(k)``, ``F(k) = P(Z <= k)``:
    ``a^-k / (1 + a)`` for ``k < 0``, ``1 - a^(k+1) / (1 + a)`` for ``k >= 0``."""
    one = 1 << bits
    d_lo, d_hi = one + a_lo, one + a_hi          # bounds on 2^bits (1 + a)
    if k < 0:
        m = -k
        return (lo_pow[m] << bits) // d_hi, -((-(hi_pow[m] << bits)) // d_lo)
    m = k + 1
    tail_lo = (lo_pow[m] << bits) // d_hi
    tail_hi = -((-(hi_pow[m] << bits)) // d_lo)
    return one - tail_hi, one - tail_lo


def _exact_cdf_word(k: int, y: Decimal, bits: int) -> int:
    """``floor(2^64 F(k))`` certified at ``bits`` of precision, raising the precision until
    the two bounds agree."""
    while True:
        m = abs(k) + 1
        lo_pow, hi_pow = _fixed_power_bounds(y, m, bits)
        lo, hi = _cdf_scaled_bounds(k, lo_pow, hi_pow, lo_pow[1], hi_pow[1], bits)
        shift = bits - _WORD_BITS
        if lo >> shift == hi >> shift:
            return lo >> shift
        bits *= 2


def _geometric_thresholds(y: Decimal, count: int) -> list[int]:
    """``floor(2^64 (1 - a^(j+1)))`` for ``j = 0..count-1``: the CDF of the geometric
    law ``P(G = j) = (1 - a) a^j``, certified."""
    bits = _FIXED_BITS
    lo_pow, hi_pow = _fixed_power_bounds(y, count + 1, bits)
    one, shift = 1 << bits, bits - _WORD_BITS
    out = []
    for j in range(count):
        lo, hi = one - hi_pow[j + 1], one - lo_pow[j + 1]
        if lo >> shift != hi >> shift:  # undecided at this precision: recompute exactly
            lo = _exact_geometric_word(j, y, bits * 2) << shift
        out.append(lo >> shift)
    return out


def _exact_geometric_word(j: int, y: Decimal, bits: int) -> int:
    while True:
        lo_pow, hi_pow = _fixed_power_bounds(y, j + 1, bits)
        one, shift = 1 << bits, bits - _WORD_BITS
        lo, hi = one - hi_pow[j + 1], one - lo_pow[j + 1]
        if lo >> shift == hi >> shift:
            return lo >> shift
        bits *= 2


@dataclass(frozen=True)
class _Inversion:
    """Thresholds ``T[i] = floor(2^64 F(first + i))`` of a CDF ``F`` and a guide table
    ``guide[s] = #{i : T[i] < s 2^44}`` over the top ``_GUIDE_BITS`` bits of ``U``."""

    first: int
    thresholds: NDArray[np.uint64]
    guide: NDArray[np.int64]
    word: Any  # (k, bits) -> floor(2^bits F(k)), for settling ties exactly

    @classmethod
    def build(cls, first: int, thresholds: list[int], word: Any) -> _Inversion:
        t = np.array(thresholds, dtype=np.uint64)
        if np.any(t[1:] < t[:-1]):
            raise ValueError("thresholds must be non-decreasing")
        starts = (np.arange(2 ** _GUIDE_BITS + 1, dtype=np.uint64)
                  << np.uint64(_WORD_BITS - _GUIDE_BITS))
        starts[-1] = np.uint64(2 ** 64 - 1)
        guide = np.searchsorted(t, starts, side="left").astype(np.int64)
        guide[-1] = t.size
        return cls(first, t, guide, word)

    def count_below(self, u: NDArray[np.uint64]) -> NDArray[np.int64]:
        """``#{i : T[i] < u}`` for each ``u`` (guide table, then a search where a slice
        holds thresholds)."""
        top = (u >> np.uint64(_WORD_BITS - _GUIDE_BITS)).astype(np.int64)
        c = self.guide[top]
        rows = np.flatnonzero(self.guide[top + 1] > c)
        if rows.size:
            c[rows] = np.searchsorted(self.thresholds, u[rows], side="left")
        return c


class ExactSampler:
    """Discrete Laplace with exactly its law, from 64-bit CSPRNG words (module
    docstring)."""

    def __init__(self, epsilon: float, sensitivity: int) -> None:
        discrete_laplace_a(epsilon, sensitivity)
        # y = epsilon / sensitivity from the exact value of the double epsilon, rounded
        # down at 100 digits: a = exp(-y) is then never smaller than exp(-epsilon /
        # sensitivity), so the mechanism's epsilon is never above the nominal one
        with localcontext() as ctx:
            ctx.prec = 100
            ctx.rounding = "ROUND_FLOOR"
            self.y = Decimal(epsilon) / Decimal(sensitivity)
        ratio = float(self.y)
        reach = max(1, math.ceil(_TABLE_TAIL_BITS * math.log(2) / ratio))
        self.low, self.high = -reach, reach
        bits = _FIXED_BITS
        lo_pow, hi_pow = _fixed_power_bounds(self.y, reach + 1, bits)
        shift = bits - _WORD_BITS
        thresholds = []
        for k in range(self.low, self.high + 1):
            lo, hi = _cdf_scaled_bounds(k, lo_pow, hi_pow, lo_pow[1], hi_pow[1], bits)
            thresholds.append(lo >> shift if lo >> shift == hi >> shift
                              else _exact_cdf_word(k, self.y, bits * 2))
        self.two_sided = _Inversion.build(self.low, thresholds, self._cdf_bits)
        self.geometric = _Inversion.build(0, _geometric_thresholds(self.y, reach),
                                          self._geometric_bits)

    # exact bits of 2^64 F(k) beyond the word, for the undecided draws
    def _cdf_bits(self, k: int, bits: int) -> int:
        """``floor(2^bits F(k))``, computed with ``guard`` more bits until certain."""
        guard = 64
        while True:
            m = abs(k) + 1
            lo_pow, hi_pow = _fixed_power_bounds(self.y, m, bits + guard)
            lo, hi = _cdf_scaled_bounds(k, lo_pow, hi_pow, lo_pow[1], hi_pow[1], bits + guard)
            if lo >> guard == hi >> guard:
                return lo >> guard
            guard += 64

    def _geometric_bits(self, j: int, bits: int) -> int:
        """``floor(2^bits (1 - a^(j+1)))``, computed with ``guard`` more bits until
        certain."""
        guard = 64
        while True:
            lo_pow, hi_pow = _fixed_power_bounds(self.y, j + 1, bits + guard)
            one = 1 << (bits + guard)
            lo, hi = one - hi_pow[j + 1], one - lo_pow[j + 1]
            if lo >> guard == hi >> guard:
                return lo >> guard
            guard += 64

    def sample(self, size: int, rng: np.random.Generator) -> NDArray[np.int64]:
        if size < 0:
            raise ValueError(f"size={size!r}: must be >= 0")
        bitgen = rng.bit_generator
        table = self.two_sided
        c = _invert(table, bitgen, size)
        z = self.low + c
        below = np.flatnonzero(c == 0)                        # Z <= low: low - G
        above = np.flatnonzero(c == table.thresholds.size)     # Z > high: high + 1 + G
        if below.size:
            z[below] = self.low - self._geometric(bitgen, below.size)
        if above.size:
            z[above] = self.high + 1 + self._geometric(bitgen, above.size)
        return z

    def _geometric(self, bitgen: Any, size: int) -> NDArray[np.int64]:
        """``P(G = j) = (1 - a) a^j``, exactly; past the table, memorylessness."""
        g = _invert(self.geometric, bitgen, size)
        past = np.flatnonzero(g == self.geometric.thresholds.size)
        if past.size:
            g[past] = self.geometric.thresholds.size + self._geometric(bitgen, past.size)
        return g


def _invert(table: _Inversion, bitgen: Any, size: int) -> NDArray[np.int64]:
    """For each draw, ``c = #{i : V >= F(first + i)}`` over the table: the smallest ``k``
    of the table with ``V < F(k)`` is ``first + c`` (``c = 0``: at or below ``first``;
    ``c = n``: past the table). Ties ``U == T_i`` are settled exactly."""
    u = np.asarray(bitgen.random_raw(size), dtype=np.uint64)
    c = table.count_below(u)
    n = table.thresholds.size
    at = np.minimum(c, n - 1)
    for row in np.flatnonzero((c < n) & (table.thresholds[at] == u)):
        k = int(c[row])
        while k < n and int(table.thresholds[k]) == int(u[row]):
            if _exactly_below(table.word, table.first + k, bitgen):
                break
            k += 1
        c[row] = k
    return c


def _exactly_below(word: Any, k: int, bitgen: Any) -> bool:
    """With ``U == floor(2^64 F(k))`` drawn: whether ``V < F(k)``, i.e. whether the
    continuation ``V'`` (further words, drawn as needed) is below the fractional part of
    ``2^64 F(k)``. ``word(k, bits)`` gives ``floor(2^bits F(k))``. The comparison goes 64
    bits at a time and ends at the first differing word (F(k) is irrational, so it ends
    with probability 1; each further word is needed with probability 2^-64)."""
    draw, width = 0, 0
    while True:
        draw = (draw << _WORD_BITS) | int(bitgen.random_raw())
        width += _WORD_BITS
        fraction = word(k, _WORD_BITS + width) & ((1 << width) - 1)
        if draw != fraction:
            return bool(draw < fraction)


@lru_cache(maxsize=64)
def exact_sampler(epsilon: float, sensitivity: int) -> ExactSampler:
    """The (cached) exact sampler for one parameter pair."""
    return ExactSampler(epsilon, sensitivity)


def prepare_samplers(parameters: Iterable[tuple[float, int]]) -> int:
    """Build (and cache in this process) the exact sampler of each ``(epsilon,
    sensitivity)``, paid once per process. A process that forks task
    processes calls this so that they start with the tables built; the tables depend on
    the parameters only, so a sampler built here is the one a task would build."""
    built = {(float(e), int(s)) for e, s in parameters}
    for epsilon, sensitivity in built:
        exact_sampler(epsilon, sensitivity)
    return len(built)


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
