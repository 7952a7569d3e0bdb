"""Exact noise laws and confidence sets for a ratio of noisy values, by test inversion.

Reads noisy values and public parameters only (epsilons, sensitivities, confidence
levels), so the reliability rules built on it are post-processing: no privacy budget.
A :class:`Law` holds a noise law as buckets plus the truncated ("lost") mass, which every
bound counts against us: :func:`discrete_laplace` gives the law of a sum of i.i.d. draws
by convolution, :func:`maximum` that of a maximum, :func:`coarsen` merges buckets (only
widening what the bounds allow). The ratio test is inverted over cells of the ratio's
range into a certified superset of the confidence set (its hull), also for a denominator
error known only by its size (the median of five noisy values). The laws, the test and
its guarantee are derived in docs/design.md, Derivations."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dp_ops.privacy.noise import discrete_laplace_a, discrete_laplace_margin

# Each draw's pmf is cut where its two-sided tail is below TRUNCATED_MASS / n: the lost
# mass of a sum of n draws is at most TRUNCATED_MASS and is counted against every bound.
TRUNCATED_MASS = 1e-15
MAX_BUCKETS = 1500
CELL_STEP = 0.01
_BISECTION_STEPS = 60
_ROW_BLOCK = 4096

Floats = NDArray[np.float64]


@dataclass(frozen=True)
class Law:
    """A law on the real line: ``mass[i]`` in ``[lo[i], hi[i]]`` (sorted by ``hi``), and
    ``lost`` mass that may lie anywhere."""

    lo: Floats
    hi: Floats
    mass: Floats
    lost: float

    def upper_tail(self, x: ArrayLike) -> Floats:
        """An upper bound on ``P(V > x)`` (a bucket counts when its upper end exceeds
        ``x``; the lost mass always counts)."""
        suffix = _suffix(self)
        idx = np.searchsorted(self.hi, np.asarray(x, dtype=np.float64), side="right")
        return np.asarray(suffix[idx] + self.lost, dtype=np.float64)


def _suffix(law: Law) -> Floats:
    # suffix[i] = mass of buckets i.. (sorted by hi); small terms summed first
    return np.append(np.cumsum(law.mass[::-1])[::-1], 0.0)


def exact(values: ArrayLike, mass: ArrayLike, lost: float = 0.0) -> Law:
    """A law of atoms ``values`` (any order) with probabilities ``mass``."""
    v = np.asarray(values, dtype=np.float64)
    m = np.asarray(mass, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    v, m = v[order], m[order]
    keep = m > 0
    return Law(v[keep].copy(), v[keep].copy(), m[keep].copy(), float(lost))


@lru_cache(maxsize=128)
def _discrete_laplace_pmf(epsilon: float, sensitivity: int, n: int
                          ) -> tuple[int, NDArray[np.float64]]:
    """(k, pmf) of the sum of ``n`` draws on ``-n k .. n k``."""
    a = discrete_laplace_a(epsilon, sensitivity)
    k = discrete_laplace_margin(TRUNCATED_MASS / n, epsilon=epsilon, sensitivity=sensitivity)
    support = np.arange(-k, k + 1)
    # a^|j| as exp(-|j| epsilon / sensitivity): no rounding error growing with |j|
    pmf = (1 - a) / (1 + a) * np.exp(-np.abs(support) * (epsilon / sensitivity))
    result: NDArray[np.float64] | None = None
    power, rest = pmf, n
    while rest:  # n-fold convolution by repeated squaring
        if rest & 1:
            result = power if result is None else np.convolve(result, power)
        rest >>= 1
        if rest:
            power = np.convolve(power, power)
    assert result is not None
    result = np.clip(result, 0.0, None)
    result.setflags(write=False)
    return k, result


def discrete_laplace(epsilon: float, sensitivity: int, n: int = 1) -> Law:
    """The law of the sum of ``n`` i.i.d. discrete Laplace draws (``dp_ops.privacy.noise``),
    exact up to a truncated tail of at most ``TRUNCATED_MASS`` (held as ``lost``)."""
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n={n!r}: must be an integer >= 1")
    k, pmf = _discrete_laplace_pmf(float(epsilon), int(sensitivity), int(n))
    support = np.arange(-n * k, n * k + 1, dtype=np.float64)
    return coarsen(exact(support, pmf, TRUNCATED_MASS))


def discrete_laplace_pmf(epsilon: float, sensitivity: int, n: int = 1
                         ) -> tuple[int, NDArray[np.float64]]:
    """``(m, pmf)``: ``pmf[j]`` is ``P(V = j - m)`` for the sum ``V`` of ``n`` i.i.d.
    discrete Laplace draws, on ``-m .. m`` (the exact atoms :func:`discrete_laplace`
    buckets; a truncated tail of at most ``TRUNCATED_MASS`` is left out). Read-only."""
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n={n!r}: must be an integer >= 1")
    k, pmf = _discrete_laplace_pmf(float(epsilon), int(sensitivity), int(n))
    return int(n) * k, pmf


def convolve(*laws: Law) -> Law:
    """The law of a sum of independent exact integer-atom laws."""
    if not laws:
        raise ValueError("convolve needs at least one law")
    out = laws[0]
    for law in laws[1:]:
        for part in (out, law):
            if np.any(part.lo != part.hi) or np.any(part.lo != np.round(part.lo)):
                raise ValueError("convolve needs exact integer atoms (before coarsening)")
        lo = int(out.lo[0]) + int(law.lo[0])
        a = np.zeros(int(out.hi[-1] - out.lo[0]) + 1)
        a[(out.lo - out.lo[0]).astype(np.int64)] = out.mass
        b = np.zeros(int(law.hi[-1] - law.lo[0]) + 1)
        b[(law.lo - law.lo[0]).astype(np.int64)] = law.mass
        pmf = np.clip(np.convolve(a, b), 0.0, None)
        out = exact(np.arange(lo, lo + pmf.size), pmf, out.lost + law.lost)
    return out


def discrete_laplace_sum(cells: tuple[tuple[float, int], ...]) -> Law:
    """The law of a sum of independent discrete Laplace draws, one per
    ``(epsilon, sensitivity)`` in ``cells`` (equal parameters are grouped and convolved
    exactly)."""
    if not cells:
        raise ValueError("cells: at least one (epsilon, sensitivity)")
    return _discrete_laplace_sum(tuple(sorted((float(e), int(s)) for e, s in cells)))


@lru_cache(maxsize=128)
def _discrete_laplace_sum(cells: tuple[tuple[float, int], ...]) -> Law:
    groups: dict[tuple[float, int], int] = {}
    for cell in cells:
        groups[cell] = groups.get(cell, 0) + 1
    parts = []
    for (eps, sens), n in groups.items():
        k, pmf = _discrete_laplace_pmf(eps, sens, n)
        parts.append(exact(np.arange(-n * k, n * k + 1), pmf, TRUNCATED_MASS))
    return coarsen(convolve(*parts))


def maximum(law: Law, k: int) -> Law:
    """The law of the maximum of ``k`` i.i.d. draws of an exact-atom ``law``; the lost
    mass of each draw is put above every atom (so upper tails are never understated)."""
    if np.any(law.lo != law.hi):
        raise ValueError("maximum needs exact atoms (before coarsening)")
    cdf = np.cumsum(law.mass)  # P(V <= v) on the support, lost mass left out (above)
    cdf_k = cdf ** k
    mass = np.diff(np.concatenate(([0.0], cdf_k)))
    return exact(law.lo, np.clip(mass, 0.0, None), max(0.0, 1.0 - float(cdf_k[-1])))


def positive_part(law: Law) -> Law:
    """The law of ``max(V, 0)``."""
    neg = law.hi <= 0
    at_zero = float(law.mass[neg].sum())
    lo = np.concatenate(([0.0], np.maximum(law.lo[~neg], 0.0)))
    hi = np.concatenate(([0.0], law.hi[~neg]))
    mass = np.concatenate(([at_zero], law.mass[~neg]))
    return Law(lo, hi, mass, law.lost)


def scaled(law: Law, factor: float) -> Law:
    """The law of ``factor x V`` for ``factor > 0``."""
    if not factor > 0:
        raise ValueError(f"factor={factor!r}: must be > 0")
    return Law(law.lo * factor, law.hi * factor, law.mass, law.lost)


def coarsen(law: Law, max_buckets: int = MAX_BUCKETS) -> Law:
    """Merge neighbouring buckets so at most ``max_buckets`` remain; a merged bucket spans
    its parts, so every bound computed from it is still an upper bound."""
    size = law.mass.size
    if size <= max_buckets:
        return law
    width = math.ceil(size / max_buckets)
    starts = np.arange(0, size, width)
    lo = law.lo[starts]
    hi = law.hi[np.minimum(starts + width, size) - 1]
    mass = np.add.reduceat(law.mass, starts)
    return Law(lo, hi, mass, law.lost)


def median_shift_magnitude(w: Law) -> Law:
    """A law dominating ``|median(t + W) - median(t)|`` over five days, for *any* true
    integer values ``t`` and i.i.d. symmetric integer noises ``W_j`` of law ``w`` (module
    docstring, "The median of five noisy values")."""
    if np.any(w.lo != w.hi) or np.any(w.lo != np.round(w.lo)):
        raise ValueError("median_shift_magnitude needs exact integer atoms")
    support = w.lo.astype(np.int64)
    top = int(max(abs(support[0]), abs(support[-1])))
    m = np.arange(0, top + 1)
    cdf = np.concatenate(([0.0], np.cumsum(w.mass)))

    def at_most(k: NDArray[np.int64]) -> Floats:  # P(W <= k) on the support
        return np.asarray(cdf[np.searchsorted(support, k, side="right")], dtype=np.float64)

    f = at_most(m)          # P(W <= m)
    above = 1.0 - f          # P(W > m) = P(W < -m) (symmetry)
    if _holds_below_chord(at_most, top):
        bound = np.zeros(m.size)
        for below in range(3):        # days fixed far below the median: 0, 1 or 2
            for far in range(3):      # days fixed far above it
                n, r = 5 - below - far, 3 - below
                up = sum(math.comb(n, i) * f ** i * above ** (n - i) for i in range(r))
                down = sum(math.comb(n, i) * above ** i * f ** (n - i)
                           for i in range(r, n + 1))
                bound = np.maximum(bound, up + down)
    else:  # the union of the two one-sided bounds, valid for any symmetric law
        bound = 2 * (1 - f ** 3)
    bound = np.minimum(np.maximum.accumulate(bound[::-1])[::-1], 1.0)
    mass = np.concatenate(([1.0 - bound[0]], bound[:-1] - bound[1:]))
    return exact(m.astype(np.float64), np.clip(mass, 0.0, None), 5 * w.lost + float(bound[-1]))


def _holds_below_chord(at_most: object, top: int) -> bool:
    """Whether every point ``(S(m - g), S(m + g))``, ``g >= 0``, lies below the chord from
    ``(S(m), S(m))`` to ``(1, 0)`` (``S(k) = P(W > k)``), for every ``m >= 0``: the
    condition under which the extreme configurations are the worst (module docstring)."""
    assert callable(at_most)
    m = np.arange(0, top + 1)[:, None]
    g = np.arange(0, 2 * top + 2)[None, :]
    s_m = 1.0 - at_most(m)
    x = 1.0 - at_most(m - g)
    y = 1.0 - at_most(m + g)
    with np.errstate(divide="ignore", invalid="ignore"):
        chord = np.where(s_m < 1, s_m * (1 - x) / (1 - s_m), 1.0)
    return bool(np.all(y <= chord + 1e-12))


# -- the ratio test -----------------------------------------------------------------------

def ratio_edges(lowest: float, start: float, highest: float, step: float = CELL_STEP
                ) -> Floats:
    """Cell edges: ``lowest`` (e.g. 0), then a geometric grid from ``start`` to at least
    ``highest`` with relative step ``step``."""
    if not 0 <= lowest < start < highest:
        raise ValueError("need 0 <= lowest < start < highest")
    n = math.ceil(math.log(highest / start) / math.log1p(step))
    return np.concatenate(([lowest], start * (1 + step) ** np.arange(n + 1)))


def uniform_edges(lowest: float, highest: float, width: float) -> Floats:
    n = math.ceil((highest - lowest) / width)
    return np.linspace(lowest, highest, n + 1)


@dataclass(frozen=True)
class RatioTest:
    """Thresholds of the level-``alpha`` ratio test on the cells ``edges`` (module
    docstring). ``tail_u`` is the bound used above the last edge, ``None`` when the true
    ratio cannot exceed it."""

    edges: Floats
    thresholds: Floats
    tail_u: float | None
    alpha: float

    def hull(self, numerator: ArrayLike, denominator: ArrayLike
             ) -> tuple[Floats, Floats]:
        """``[lower, upper]`` holding the level-``alpha`` confidence set of the true ratio
        for each observed (numerator, denominator); ``(-inf, inf)`` where the denominator
        is not positive or not finite."""
        n = np.atleast_1d(np.asarray(numerator, dtype=np.float64))
        d = np.atleast_1d(np.asarray(denominator, dtype=np.float64))
        n, d = np.broadcast_arrays(n, d)
        lower = np.full(n.shape, -np.inf)
        upper = np.full(n.shape, np.inf)
        ok = (d > 0) & np.isfinite(d) & np.isfinite(n)
        idx = np.flatnonzero(ok)
        e_lo, e_hi, q = self.edges[:-1], self.edges[1:], self.thresholds
        for start in range(0, idx.size, _ROW_BLOCK):
            rows = idx[start:start + _ROW_BLOCK]
            nn, dd = n.flat[rows][:, None], d.flat[rows][:, None]
            a = np.maximum(e_lo, (nn - q) / dd)   # possibly accepted part of each cell
            b = np.minimum(e_hi, (nn + q) / dd)
            live = a <= b
            lo = np.where(live, a, np.inf).min(axis=1)
            hi = np.where(live, b, -np.inf).max(axis=1)
            if self.tail_u is not None:
                rejected = dd[:, 0] - np.maximum(nn[:, 0], 0.0) / self.edges[-1] > self.tail_u
                lo = np.where(rejected, lo, np.minimum(lo, self.edges[-1]))
                hi = np.where(rejected, hi, np.inf)
            lower.flat[rows] = lo
            upper.flat[rows] = hi
        return lower, upper


def ratio_test(x: Law, y: Law, *, alpha: float, edges: Floats, bounded: bool,
               magnitude: bool = False) -> RatioTest:
    """Build the level-``alpha`` test for numerator noise ``x`` and denominator law ``y``
    on cells ``edges``; ``bounded`` says whether the true ratio is known to lie at or
    below ``edges[-1]`` (module docstring). With ``magnitude``, ``y`` is a law dominating
    ``|E_D|`` (non-negative; module docstring, "A denominator error known by its size")."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r}: must be in (0, 1)")
    if magnitude:
        return _magnitude_test(x, y, alpha=alpha, edges=edges, bounded=bounded)
    target = alpha / 2
    e_lo, e_hi = edges[:-1], edges[1:]
    # g_j over each y bucket: max over the cell's two ends and the bucket's two ends
    g = np.max(np.stack([np.outer(e_lo, y.lo), np.outer(e_lo, y.hi),
                         np.outer(e_hi, y.lo), np.outer(e_hi, y.hi)]), axis=0)
    thresholds = _quantiles(x, y.mass, y.lost, g, target)
    tail_u: float | None = None
    if not bounded:
        # rho >= e_K: X + rho Y <= rho (|X| / e_K + max(Y, 0))
        abs_x = _abs_law(x)
        shrunk = Law(abs_x.lo / edges[-1], abs_x.hi / edges[-1], abs_x.mass, abs_x.lost)
        y_pos = positive_part(y)
        tail_u = float(_quantiles(shrunk, y_pos.mass, y_pos.lost, y_pos.hi[None, :],
                                  target)[0])
    return RatioTest(np.asarray(edges, dtype=np.float64), thresholds, tail_u, alpha)


def _magnitude_test(x: Law, e_abs: Law, *, alpha: float, edges: Floats, bounded: bool
                    ) -> RatioTest:
    if np.any(e_abs.lo < 0):
        raise ValueError("a magnitude law must be non-negative")
    # rho in a cell: S(q - rho |E|) <= S(q - e_{j+1} |E|)
    g = np.outer(edges[1:], e_abs.hi)
    thresholds = _quantiles(x, e_abs.mass, e_abs.lost, g, alpha, own_tail=True)
    tail_u: float | None = None
    if not bounded:
        # rho >= e_K: |X - rho E| <= rho (|X| / e_K + |E|), both sides together
        abs_x = _abs_law(x)
        shrunk = Law(abs_x.lo / edges[-1], abs_x.hi / edges[-1], abs_x.mass, abs_x.lost)
        tail_u = float(_quantiles(shrunk, e_abs.mass, e_abs.lost, e_abs.hi[None, :],
                                  alpha)[0])
    return RatioTest(np.asarray(edges, dtype=np.float64), thresholds, tail_u, alpha)


def _abs_law(law: Law) -> Law:
    """A law dominating ``|V|`` from above: each bucket at its largest absolute value."""
    top = np.maximum(np.abs(law.lo), np.abs(law.hi))
    bottom = np.where((law.lo <= 0) & (law.hi >= 0), 0.0,
                      np.minimum(np.abs(law.lo), np.abs(law.hi)))
    order = np.argsort(top, kind="stable")
    return Law(bottom[order], top[order], law.mass[order], law.lost)


def _quantiles(x: Law, y_mass: Floats, y_lost: float, g: Floats, target: float, *,
               own_tail: bool = False) -> Floats:
    """For each row of ``g`` (the shift of every y bucket): the smallest ``t`` (to
    rounding, rounded up) with ``sum_i y_mass[i] P(X > t - g[i]) + lost <= target``
    (plus ``P(X > t)`` with ``own_tail``)."""
    suffix = _suffix(x) + x.lost

    def tail(t: Floats) -> Floats:
        idx = np.searchsorted(x.hi, t[:, None] - g, side="right")
        out: Floats = (suffix[idx] * y_mass[None, :]).sum(axis=1) + y_lost
        if own_tail:
            out = out + suffix[np.searchsorted(x.hi, t, side="right")]
        return out

    low = np.full(g.shape[0], x.lo[0] + g.min(axis=1) - 1.0)
    high = np.full(g.shape[0], x.hi[-1] + g.max(axis=1))
    if np.any(tail(high) > target):
        raise ValueError(f"the laws' truncated mass exceeds the level {target!r}")
    for _ in range(_BISECTION_STEPS):
        mid = (low + high) / 2
        fine = tail(mid) <= target
        high = np.where(fine, mid, high)
        low = np.where(fine, low, mid)
        if np.all(high - low <= 1e-7 * np.maximum(1.0, np.abs(high))):
            break
    return high
