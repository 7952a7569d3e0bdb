"""The exact discrete Laplace sampler: its thresholds against exact rational arithmetic,
its tie and tail paths with scripted random words, and its law (the chi-square tests of
test_noise.py run through it too)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dp_ops.privacy.noise import (
    ExactSampler,
    discrete_laplace_pmf,
    exact_sampler,
    noise_generator,
    sample_discrete_laplace,
)

PARAMETERS = [(0.44, 1), (0.22, 1), (0.1493, 1), (0.112, 1), (0.22, 720)]
GRID = Fraction(1, 2 ** 400)  # outward rounding grid of the rational enclosures


def _down(x: Fraction, grid: Fraction = GRID) -> Fraction:
    return Fraction(math.floor(x / grid)) * grid


def _up(x: Fraction, grid: Fraction = GRID) -> Fraction:
    return Fraction(math.ceil(x / grid)) * grid


def _grid(bits: int) -> tuple[Fraction, int]:
    """The rounding grid and Taylor terms for words of ``bits`` bits: 2^-400 and 30 terms
    for 64-bit words, finer and longer for deeper bits."""
    return Fraction(1, 1 << (bits + 336)), 30 + max(0, bits - 64) // 10


def exp_enclosure(y: Fraction, grid: Fraction = GRID,
                  terms: int = 30) -> tuple[Fraction, Fraction]:
    """Rational ``lo <= exp(-y) <= hi`` for ``y > 0``: the alternating Taylor series of
    ``exp(-y / 2^s)`` brackets it (partial sums alternate around the limit once the
    terms decrease), then ``s`` squarings, rounding outward on a 2^-400 grid (or
    ``grid``)."""
    s = max(0, math.ceil(math.log2(float(y))) + 12)
    r = y / 2 ** s
    term, total, sums = Fraction(1), Fraction(0), []
    for i in range(terms):
        total += term
        sums.append(total)
        term = term * (-r) / (i + 1)
    lo, hi = _down(min(sums[-1], sums[-2]), grid), _up(max(sums[-1], sums[-2]), grid)
    for _ in range(s):
        lo, hi = _down(lo * lo, grid), _up(hi * hi, grid)
    return lo, hi


def power_enclosure(lo: Fraction, hi: Fraction, m: int,
                    grid: Fraction = GRID) -> tuple[Fraction, Fraction]:
    rlo, rhi, blo, bhi = Fraction(1), Fraction(1), lo, hi
    while m:
        if m & 1:
            rlo, rhi = _down(rlo * blo, grid), _up(rhi * bhi, grid)
        m >>= 1
        blo, bhi = _down(blo * blo, grid), _up(bhi * bhi, grid)
    return rlo, rhi


def exact_threshold(sampler: ExactSampler, k: int, bits: int = 64) -> int:
    """floor(2^64 F(k)) (or floor(2^bits F(k))) from rational enclosures; fails if they
    cannot decide it."""
    grid, terms = _grid(bits)
    a_lo, a_hi = exp_enclosure(Fraction(sampler.y), grid, terms)
    m = -k if k < 0 else k + 1
    p_lo, p_hi = power_enclosure(a_lo, a_hi, m, grid)
    if k < 0:
        f_lo, f_hi = p_lo / (1 + a_hi), p_hi / (1 + a_lo)
    else:
        f_lo, f_hi = 1 - p_hi / (1 + a_lo), 1 - p_lo / (1 + a_hi)
    lo, hi = math.floor(f_lo * (1 << bits)), math.floor(f_hi * (1 << bits))
    assert lo == hi, f"enclosure too wide at k={k}"
    return lo


def exact_geometric_threshold(sampler: ExactSampler, j: int, bits: int = 64) -> int:
    """floor(2^64 (1 - a^(j+1))) (or with 2^bits), the geometric tail's CDF at ``j``, from
    rational enclosures; fails if they cannot decide it."""
    grid, terms = _grid(bits)
    a_lo, a_hi = exp_enclosure(Fraction(sampler.y), grid, terms)
    p_lo, p_hi = power_enclosure(a_lo, a_hi, j + 1, grid)
    lo, hi = math.floor((1 - p_hi) * (1 << bits)), math.floor((1 - p_lo) * (1 << bits))
    assert lo == hi, f"enclosure too wide at j={j}"
    return lo


@pytest.mark.parametrize(("epsilon", "sensitivity"), PARAMETERS)
def test_thresholds_match_exact_rational_arithmetic(epsilon: float, sensitivity: int) -> None:
    sampler = exact_sampler(epsilon, sensitivity)
    table = sampler.two_sided
    n = table.thresholds.size
    rng = np.random.default_rng(7)
    picks = {0, 1, n // 2 - 1, n // 2, n // 2 + 1, n - 2, n - 1}
    picks |= set(rng.integers(0, n, 12).tolist())
    for i in sorted(picks):
        k = table.first + i
        assert int(table.thresholds[i]) == exact_threshold(sampler, k), (epsilon, k)
    # the mechanism's epsilon is never above the nominal one: y rounds down
    assert Fraction(sampler.y) <= Fraction(epsilon) / sensitivity
    assert Fraction(epsilon) / sensitivity - Fraction(sampler.y) < Fraction(1, 10 ** 90)


@pytest.mark.parametrize(("epsilon", "sensitivity"), PARAMETERS)
def test_geometric_thresholds_match_exact_rational_arithmetic(epsilon: float,
                                                              sensitivity: int) -> None:
    sampler = exact_sampler(epsilon, sensitivity)
    table = sampler.geometric
    for j in sorted({0, 1, 2, table.thresholds.size // 3, table.thresholds.size - 1}):
        assert int(table.thresholds[j]) == exact_geometric_threshold(sampler, j), (epsilon, j)


class ScriptedBits:
    """A bit generator that returns scripted 64-bit words (then fails): to drive the
    sampler down its rare paths."""

    def __init__(self, words: list[int]) -> None:
        self.words = list(words)

    def random_raw(self, size: int | None = None) -> object:
        if size is None:
            return np.uint64(self.words.pop(0))
        out = np.array(self.words[:size], dtype=np.uint64)
        if out.size != size:
            raise AssertionError("the sampler asked for more words than scripted")
        del self.words[:size]
        return out


class ScriptedRng:
    def __init__(self, words: list[int]) -> None:
        self.bit_generator = ScriptedBits(words)


def _fraction_word(sampler: ExactSampler, k: int) -> int:
    """The 64 bits after the first 64 of 2^64 F(k)."""
    return sampler._cdf_bits(k, 128) & (2 ** 64 - 1)


def test_a_tie_is_settled_by_the_next_word() -> None:
    sampler = exact_sampler(0.44, 1)
    table = sampler.two_sided
    i = table.thresholds.size // 2 + 3          # k = 3
    k = table.first + i
    tie = int(table.thresholds[i])
    fraction = _fraction_word(sampler, k)
    assert 0 < fraction < 2 ** 64 - 1
    # continuation below the fraction: V < F(k), so Z = k
    below = sampler.sample(1, ScriptedRng([tie, fraction - 1]))  # type: ignore[arg-type]
    assert below.tolist() == [k]
    # above it: V > F(k) (and below F(k + 1), whose threshold is larger), so Z = k + 1
    above = sampler.sample(1, ScriptedRng([tie, fraction + 1]))  # type: ignore[arg-type]
    assert above.tolist() == [k + 1]


def test_away_from_ties_one_word_decides() -> None:
    sampler = exact_sampler(0.22, 1)
    table = sampler.two_sided
    i = table.thresholds.size // 2
    t = int(table.thresholds[i])
    words = [t - 1, t + 1, 0, 2 ** 64 // 2, 0]  # the last: the lower tail's geometric
    z = sampler.sample(4, ScriptedRng(words))  # type: ignore[arg-type]
    first = table.first
    assert z[0] == first + i        # U < T_i: V < F(first + i), and V > F(first + i - 1)
    assert z[1] == first + i + 1
    assert z[2] == sampler.low      # below every threshold: low - G, G = 0
    assert z[3] == 0                # the middle of [0, 2^64): the median, 0


def test_both_tails_continue_exactly_past_the_table() -> None:
    """No cap: the largest word goes past the table, and the geometric continuation
    (memoryless) carries on; the smallest word goes below it."""
    sampler = exact_sampler(0.44, 1)
    top = 2 ** 64 - 1
    g_table = sampler.geometric.thresholds
    # U past the two-sided table, then a geometric draw past its own table, then G' = 0
    z = sampler.sample(1, ScriptedRng([top, top, 0]))  # type: ignore[arg-type]
    assert z.tolist() == [sampler.high + 1 + g_table.size + 0]
    z = sampler.sample(1, ScriptedRng([0, 0]))  # type: ignore[arg-type]
    assert z.tolist() == [sampler.low - 0]
    assert sampler.high + 1 + g_table.size > 82  # beyond the old float sampler's cap


def draw_one(sampler: ExactSampler, words: list[int]) -> tuple[list[int], list[int]]:
    """One draw from scripted ``words``: (Z, the words it left unused)."""
    rng = ScriptedRng(words)
    z = sampler.sample(1, rng)  # type: ignore[arg-type]
    return z.tolist(), rng.bit_generator.words


@pytest.mark.parametrize(("epsilon", "sensitivity"), PARAMETERS)
def test_both_ends_of_the_table_are_drawn_exactly(epsilon: float, sensitivity: int) -> None:
    """Z = high and Z = low + 1 come from the table's end thresholds (computed here with
    rational arithmetic, not by the sampler): a word just under floor(2^64 F(high)) gives
    high and no tail draw, one above it goes past the table (high + 1 + G); a word just
    above floor(2^64 F(low)) gives low + 1, one under it goes below (low - G, G = 0 from a
    zero word), wherever it lies under F(low). Guards against a table one short at either
    end (Z = high never drawn: an unbounded likelihood ratio). Not statistical."""
    sampler = exact_sampler(epsilon, sensitivity)
    low, high = sampler.low, sampler.high
    top, under_top = exact_threshold(sampler, high), exact_threshold(sampler, high - 1)
    bottom, above_bottom = exact_threshold(sampler, low), exact_threshold(sampler, low + 1)
    below_bottom = exact_threshold(sampler, low - 1)
    assert under_top + 1 < top - 1 and top + 1 < 2 ** 64
    assert below_bottom + 1 < bottom - 1 and bottom + 1 < above_bottom
    # the trailing 0 would be the tail's geometric word: left unused inside the table
    assert draw_one(sampler, [top - 1, 0]) == ([high], [0])
    assert draw_one(sampler, [under_top + 1, 0]) == ([high], [0])
    assert draw_one(sampler, [top + 1, 0]) == ([high + 1], [])
    assert draw_one(sampler, [bottom + 1, 0]) == ([low + 1], [0])
    for word in (bottom - 1, below_bottom + 1, below_bottom, 0):
        assert draw_one(sampler, [word, 0]) == ([low], [])


@pytest.mark.parametrize(("epsilon", "sensitivity"), PARAMETERS)
@pytest.mark.parametrize("g", [1, 2])
def test_both_tails_step_away_from_the_table_by_the_geometric_draw(
        epsilon: float, sensitivity: int, g: int) -> None:
    """Past the table Z = low - G below it and high + 1 + G above it, G drawn from the
    geometric table: a word strictly between its thresholds floor(2^64 (1 - a^g)) and
    floor(2^64 (1 - a^(g+1))) (rational arithmetic here) gives G = g. Guards the tails'
    sign and offset for G >= 1 (G = 0 cannot tell low - G from low + G). Not
    statistical."""
    sampler = exact_sampler(epsilon, sensitivity)
    under_low = exact_threshold(sampler, sampler.low) - 1
    over_high = exact_threshold(sampler, sampler.high) + 1
    before = exact_geometric_threshold(sampler, g - 1)
    after = exact_geometric_threshold(sampler, g)
    assert before + 1 < after - 1
    for word in (before + 1, after - 1):
        assert draw_one(sampler, [under_low, word]) == ([sampler.low - g], [])
        assert draw_one(sampler, [over_high, word]) == ([sampler.high + 1 + g], [])


def test_far_tail_frequency_matches_the_law() -> None:
    """P(|Z| > 40) at epsilon 1.0 is 2 e^-41 / (1 + e^-1) ~ 2.3e-18: never seen; at
    epsilon 0.44 P(|Z| > 30) = 1.2e-6: in 2e7 draws the count is Poisson(24.3); the
    bounds [5, 55] fail with probability < 1e-6 for a correct sampler."""
    rng = noise_generator(key=11)
    z = sample_discrete_laplace(20_000_000, epsilon=0.44, sensitivity=1, rng=rng)
    a = math.exp(-0.44)
    expected = 20_000_000 * 2 * a ** 31 / (1 + a)
    count = int((np.abs(z) > 30).sum())
    assert 5 <= count <= 55, (count, expected)


def test_small_sample_fits_the_pmf_at_the_residential_sum() -> None:
    """epsilon / sensitivity = 0.22 / 720: bucketed chi-square against the exact pmf
    (200,000 draws, 30 equal-width buckets over +/- 4 scales; fixed key)."""
    rng = noise_generator(key=12)
    z = sample_discrete_laplace(200_000, epsilon=0.22, sensitivity=720, rng=rng)
    scale = 720 / 0.22
    edges = np.linspace(-4 * scale, 4 * scale, 31).round().astype(np.int64)
    observed = np.histogram(z, bins=edges)[0]
    support = np.arange(edges[0], edges[-1] + 1)
    pmf = discrete_laplace_pmf(support, epsilon=0.22, sensitivity=720)
    expected = np.array([pmf[(support >= lo) & (support < hi)].sum()
                         for lo, hi in zip(edges[:-1], edges[1:], strict=True)]) * z.size
    stat = float(((observed - expected) ** 2 / expected).sum())
    # 29 degrees of freedom: P(chi2 > 70) < 3e-5
    assert stat < 70, stat


@pytest.mark.parametrize(("epsilon", "sensitivity"), PARAMETERS)
def test_the_exact_fallbacks_give_the_rational_words(epsilon: float, sensitivity: int) -> None:
    """The certified fallbacks used when the table's fixed-point bounds cannot decide a
    word (and to settle ties bit by bit) give exactly floor(2^64 F(k)) and
    floor(2^64 (1 - a^(j+1))) from rational arithmetic, at either end of the table and
    past it. They are reached by chance only (probability ~2^-64 per draw), so they are
    checked directly."""
    from dp_ops.privacy.noise import _exact_cdf_word, _exact_geometric_word

    sampler = exact_sampler(epsilon, sensitivity)
    for k in (sampler.low - 3, sampler.low, -1, 0, 1, sampler.high, sampler.high + 2):
        word = exact_threshold(sampler, k)
        assert _exact_cdf_word(k, sampler.y, 128) == word, k
        assert sampler._cdf_bits(k, 64) == word, k
    for j in (0, 1, 7, sampler.high + 3):
        word = exact_geometric_threshold(sampler, j)
        assert _exact_geometric_word(j, sampler.y, 128) == word, j
        assert sampler._geometric_bits(j, 64) == word, j


def test_prepare_samplers_builds_each_pair_once() -> None:
    """Preparing samplers builds (and caches) one per distinct (epsilon, sensitivity)."""
    from dp_ops.privacy.noise import prepare_samplers

    assert prepare_samplers([(0.44, 1), (0.44, 1), (0.22, 2)]) == 2
    before = exact_sampler.cache_info().hits
    exact_sampler(0.22, 2)
    assert exact_sampler.cache_info().hits == before + 1


def _fraction_words(sampler: ExactSampler, k: int, n: int) -> list[int]:
    """The n 64-bit words after the first 64 bits of 2^64 F(k)."""
    bits = sampler._cdf_bits(k, 64 * (n + 1))
    return [(bits >> (64 * (n - 1 - i))) & (2 ** 64 - 1) for i in range(n)]


@pytest.mark.parametrize("odd", [False, True])
def test_a_tie_over_two_words_is_settled_by_the_third(odd: bool) -> None:
    """U equals the threshold and the next word equals the fraction's first word: the
    third word decides against the fraction's second (the comparison accumulates words,
    it does not restart). Run for a k whose threshold is even and one where it is odd (the
    fraction is masked to exactly the bits drawn)."""
    sampler = exact_sampler(0.44, 1)
    table = sampler.two_sided
    mid = table.thresholds.size // 2
    i = next(j for j in range(mid, table.thresholds.size)
             if int(table.thresholds[j]) % 2 == int(odd))
    k, tie = table.first + i, int(table.thresholds[i])
    f1, f2 = _fraction_words(sampler, k, 2)
    assert 0 < f2 < 2 ** 64 - 1
    assert draw_one(sampler, [tie, f1, f2 - 1]) == ([k], [])
    assert draw_one(sampler, [tie, f1, f2 + 1]) == ([k + 1], [])
    # one word decides when it differs from the fraction's first word
    assert draw_one(sampler, [tie, f1 + 1, 0]) == ([k + 1], [0])
    assert draw_one(sampler, [tie, f1 - 1, 0]) == ([k], [0])


def test_undecided_table_entries_are_settled_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the fixed-point bounds of a threshold straddle a word boundary (rare: about
    2^-128 per entry), the entry is recomputed at twice the precision. Here every bound at
    the table's own precision is widened past a word so that every entry takes that path;
    the tables must come out identical to the ordinary build. Not statistical."""
    from dp_ops.privacy import noise

    ordinary = ExactSampler(0.22, 1)
    wide = 1 << (noise._FIXED_BITS - noise._WORD_BITS + 1)
    real_cdf, real_pow = noise._cdf_scaled_bounds, noise._fixed_power_bounds
    fallbacks = {"cdf": 0, "geometric": 0}

    def cdf_bounds(k: int, lo_pow: list[int], hi_pow: list[int], a_lo: int, a_hi: int,
                   bits: int) -> tuple[int, int]:
        lo, hi = real_cdf(k, lo_pow, hi_pow, a_lo, a_hi, bits)
        if bits == noise._FIXED_BITS:
            fallbacks["cdf"] += 1
            return lo - wide, hi + wide
        return lo, hi

    def pow_bounds(y: object, count: int, bits: int) -> tuple[list[int], list[int]]:
        lo, hi = real_pow(y, count, bits)  # type: ignore[arg-type]
        if bits == noise._FIXED_BITS:
            fallbacks["geometric"] += 1
            return [lo[0]] + [v - wide for v in lo[1:]], [hi[0]] + [v + wide for v in hi[1:]]
        return lo, hi

    monkeypatch.setattr(noise, "_cdf_scaled_bounds", cdf_bounds)
    monkeypatch.setattr(noise, "_fixed_power_bounds", pow_bounds)
    settled = ExactSampler(0.22, 1)
    assert fallbacks["cdf"] == ordinary.two_sided.thresholds.size and fallbacks["geometric"]
    assert settled.two_sided.thresholds.tolist() == ordinary.two_sided.thresholds.tolist()
    assert settled.geometric.thresholds.tolist() == ordinary.geometric.thresholds.tolist()
    assert (settled.low, settled.high) == (ordinary.low, ordinary.high)


@pytest.mark.parametrize("y", ["0.44", "0.000305555555555555555", "1.7"])
def test_fixed_power_bounds_bracket_and_are_tight(y: str) -> None:
    """lo[m] <= 2^bits exp(-m y) <= hi[m] against rational enclosures, each bound within
    few units per power of the truth (the base itself: floor - 1 and ceil + 1)."""
    from decimal import Decimal

    from dp_ops.privacy.noise import _fixed_power_bounds

    bits, count = 192, 40
    lo, hi = _fixed_power_bounds(Decimal(y), count, bits)
    assert len(lo) == len(hi) == count + 1 and lo[0] == hi[0] == 1 << bits
    a_lo, a_hi = exp_enclosure(Fraction(y))
    for m in (1, 2, 3, count):
        p_lo, p_hi = power_enclosure(a_lo, a_hi, m)
        assert lo[m] <= p_lo * 2 ** bits and p_hi * 2 ** bits <= hi[m], m
        assert hi[m] - lo[m] <= 4 * m, m
    exact = a_lo * 2 ** bits
    assert math.floor(exact) - 1 == lo[1] and math.ceil(exact) + 1 == hi[1]


def test_the_table_reaches_forty_bits_into_each_tail() -> None:
    """The table covers k while a^|k| >= 2^-40 (exactly: reach = ceil(40 ln 2 / y)), and the
    geometric table as far."""
    for epsilon, sensitivity in PARAMETERS:
        sampler = ExactSampler(epsilon, sensitivity)
        reach = math.ceil(40 * math.log(2) / (epsilon / sensitivity))
        assert (sampler.low, sampler.high) == (-reach, reach), (epsilon, sensitivity)
        assert sampler.two_sided.first == -reach
        assert sampler.two_sided.thresholds.size == 2 * reach + 1
        assert sampler.geometric.first == 0 and sampler.geometric.thresholds.size == reach
    assert ExactSampler(100.0, 1).high == 1  # at least one entry each side, however large y


@pytest.mark.parametrize(("epsilon", "sensitivity"),
                         PARAMETERS + [(0.3, 7), (1 / 3, 1), (2.0, 3), (0.7, 9)])
def test_y_is_the_exact_ratio_rounded_down_at_100_digits(epsilon: float,
                                                          sensitivity: int) -> None:
    """y = epsilon / sensitivity from the double's exact value, rounded down to 100
    significant digits: never above the nominal ratio (a = exp(-y) is then never smaller
    than exp(-epsilon / sensitivity)) and within one unit of the 100th digit of it."""
    y = ExactSampler(epsilon, sensitivity).y
    exact = Fraction(epsilon) / sensitivity
    assert len(y.as_tuple().digits) <= 100
    unit = Fraction(10) ** (y.adjusted() - 99)
    assert Fraction(y) <= exact < Fraction(y) + unit


def test_the_geometric_tail_carries_on_past_its_own_table() -> None:
    """Past the geometric table, G = table size + G' (memorylessness), G' >= 1 here."""
    sampler = exact_sampler(0.44, 1)
    size = sampler.geometric.thresholds.size
    top = 2 ** 64 - 1
    g1 = exact_geometric_threshold(sampler, 0) + 1   # G' = 1
    assert draw_one(sampler, [top, top, g1]) == ([sampler.high + 1 + size + 1], [])
    assert draw_one(sampler, [0, top, g1]) == ([sampler.low - size - 1], [])


@pytest.mark.parametrize("which", ["cdf_word", "geometric_word", "cdf_bits", "geometric_bits"])
def test_each_exact_fallback_raises_its_precision_until_certain(
        which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each exact computation retries at a higher precision while its bounds straddle the
    answer's last bit. Here the first attempt's bounds are widened past it; the retry must
    give the very word of an undisturbed computation. Not statistical."""
    from dp_ops.privacy import noise

    sampler = ExactSampler(0.44, 1)
    k, j = 3, 2
    compute = {
        "cdf_word": lambda: noise._exact_cdf_word(k, sampler.y, 384),
        "geometric_word": lambda: noise._exact_geometric_word(j, sampler.y, 384),
        "cdf_bits": lambda: sampler._cdf_bits(k, 128),
        "geometric_bits": lambda: sampler._geometric_bits(j, 128),
    }[which]
    undisturbed = compute()
    real = noise._fixed_power_bounds
    calls: list[int] = []

    def first_one_wide(y: object, count: int, bits: int) -> tuple[list[int], list[int]]:
        lo, hi = real(y, count, bits)  # type: ignore[arg-type]
        calls.append(bits)
        if len(calls) == 1:
            wide = 1 << (bits - 60)
            return [lo[0]] + [v - wide for v in lo[1:]], [hi[0]] + [v + wide for v in hi[1:]]
        return lo, hi

    monkeypatch.setattr(noise, "_fixed_power_bounds", first_one_wide)
    assert compute() == undisturbed
    assert len(calls) == 2 and calls[1] > calls[0]


def test_an_inversion_table_must_not_decrease() -> None:
    from dp_ops.privacy.noise import _Inversion

    with pytest.raises(ValueError) as err:
        _Inversion.build(0, [1, 5, 4, 9], None)
    assert str(err.value) == "thresholds must be non-decreasing"
    ok = _Inversion.build(-1, [1, 5, 5, 9], None)
    assert ok.first == -1 and ok.thresholds.tolist() == [1, 5, 5, 9]


# -- samplers built in the test ---------------------------------------------------------------
# exact_sampler() is cached, so a test drawing from it may never build a sampler itself: the
# tests below build their own, so that a table built wrong meets the draws it gets wrong.


def test_a_freshly_built_sampler_has_the_rational_tables() -> None:
    """Both tables of a sampler built here (not the cached one) match rational arithmetic
    at either end and inside: the two-sided CDF words and the geometric tail's words."""
    for epsilon, sensitivity in [(0.44, 1), (1.0, 1)]:
        sampler = ExactSampler(epsilon, sensitivity)
        two_sided, geometric = sampler.two_sided.thresholds, sampler.geometric.thresholds
        for i in (0, 1, two_sided.size // 2, two_sided.size - 1):
            assert int(two_sided[i]) == exact_threshold(sampler, sampler.low + i), i
        for j in (0, 1, geometric.size // 2, geometric.size - 1):
            assert int(geometric[j]) == exact_geometric_threshold(sampler, j), j


def test_a_tie_at_either_end_of_the_table_is_settled_exactly() -> None:
    """U equal to the table's last word floor(2^64 F(high)): the next word, against the
    next 64 bits of 2^64 F(high) (rational arithmetic), decides between Z = high (below)
    and past the table (above: high + 1 + G, G = 0 from a zero word). U equal to its first
    word floor(2^64 F(low)): between below the table (low - G, G = 0) and low + 1. Guards
    the tie check at the table's last entry (a tie there left undecided, or settled by
    reading past the table) and the word function the constructor wires. Not
    statistical."""
    sampler = ExactSampler(0.44, 1)
    table = sampler.two_sided
    low, high = sampler.low, sampler.high
    last, first = int(table.thresholds[-1]), int(table.thresholds[0])
    f_high = exact_threshold(sampler, high, 128) % 2 ** 64
    f_low = exact_threshold(sampler, low, 128) % 2 ** 64
    assert 0 < f_high < 2 ** 64 - 1 and 0 < f_low < 2 ** 64 - 1
    # the trailing 0 would be a geometric word: left unused inside the table
    assert draw_one(sampler, [last, f_high - 1, 0]) == ([high], [0])
    assert draw_one(sampler, [last, f_high + 1, 0]) == ([high + 1], [])
    assert draw_one(sampler, [first, f_low - 1, 0]) == ([low], [])
    assert draw_one(sampler, [first, f_low + 1, 0]) == ([low + 1], [0])


def test_a_tie_in_the_geometric_tail_is_settled_exactly() -> None:
    """Past the two-sided table, a geometric word equal to floor(2^64 (1 - a^(j+1))): the
    next word, against the next 64 bits of 2^64 (1 - a^(j+1)) (rational arithmetic),
    decides between G = j (below) and G = j + 1 (above); at the geometric table's last
    entry, above goes past it (G = size + G', G' = 0 from a zero word). On both sides of
    the two-sided table. Not statistical."""
    sampler = ExactSampler(0.44, 1)
    geometric = sampler.geometric.thresholds
    over = int(sampler.two_sided.thresholds[-1]) + 1     # past the two-sided table
    under = int(sampler.two_sided.thresholds[0]) - 1     # below it
    for j in (1, geometric.size - 1):
        tie = int(geometric[j])
        fraction = exact_geometric_threshold(sampler, j, 128) % 2 ** 64
        assert 0 < fraction < 2 ** 64 - 1
        unused = [] if j == geometric.size - 1 else [0]  # G' drawn only past the table
        assert draw_one(sampler, [over, tie, fraction - 1, 0]) == ([sampler.high + 1 + j], [0])
        assert draw_one(sampler, [over, tie, fraction + 1, 0]) == (
            [sampler.high + 1 + j + 1], unused)
        assert draw_one(sampler, [under, tie, fraction - 1, 0]) == ([sampler.low - j], [0])
        assert draw_one(sampler, [under, tie, fraction + 1, 0]) == (
            [sampler.low - j - 1], unused)


def test_zero_draws_take_no_word_and_a_negative_size_is_refused() -> None:
    """size = 0 gives an empty int64 array without drawing a word (an empty table of
    cells is noised without error); a negative size is refused, naming it."""
    sampler = ExactSampler(1.0, 1)
    rng = ScriptedRng([7])
    z = sampler.sample(0, rng)  # type: ignore[arg-type]
    assert z.dtype == np.int64 and z.shape == (0,)
    assert rng.bit_generator.words == [7]
    with pytest.raises(ValueError) as err:
        sampler.sample(-1, ScriptedRng([7]))  # type: ignore[arg-type]
    assert str(err.value) == "size=-1: must be >= 0"


def test_the_guide_table_counts_the_thresholds_below_every_word() -> None:
    """guide[s] = #{i : T[i] < s 2^44} for s = 0..2^20 (the last entry: every threshold),
    and count_below(u) = #{i : T[i] < u} against a direct count, for tables with
    thresholds in the first, second and last buckets of the guide (up to the top word
    2^64 - 1, with and without a threshold there), words at each threshold, one either
    side, and at the bucket edges. Not statistical."""
    from dp_ops.privacy.noise import _Inversion

    b, top = 2 ** 44, 2 ** 64 - 1
    tables = [
        [0, 5, b - 1, b, b + 7, 2 * b + 3, 2 ** 63, top - b, top - b + 1, top - 9, top - 1,
         top],
        [3, b + 7, 2 ** 63, top - b + 1, top - 9],
        [b + 1, b + 2],
        [top - 3],
    ]
    for thresholds in tables:
        table = _Inversion.build(0, thresholds, None)
        assert table.guide.size == 2 ** 20 + 1
        for s in (0, 1, 2, 2 ** 19, 2 ** 20 - 1, 2 ** 20):
            assert table.guide[s] == sum(t < s * b for t in thresholds), (thresholds, s)
        words = sorted({0, 1, b - 1, b, b + 1, 2 * b, top - b, top - b + 1, top - 1, top}
                       | {t + d for t in thresholds for d in (-1, 0, 1) if 0 <= t + d <= top})
        counts = table.count_below(np.array(words, dtype=np.uint64))
        assert counts.tolist() == [sum(t < u for t in thresholds) for u in words], thresholds


@pytest.mark.parametrize("y", ["0.44", "0.000305555555555555555", "1.7"])
def test_fixed_power_bounds_bracket_at_any_precision(y: str) -> None:
    """At 1024 bits (the precision a tie reaches after 15 equal words) lo[m] <=
    2^1024 exp(-m y) <= hi[m] still holds, and tightly: exp(-y) is expanded with enough
    decimal digits for the precision asked, not only for the tables' 192 bits."""
    from decimal import Decimal

    from dp_ops.privacy.noise import _fixed_power_bounds

    bits = 1024
    lo, hi = _fixed_power_bounds(Decimal(y), 3, bits)
    grid, terms = _grid(bits)
    a_lo, a_hi = exp_enclosure(Fraction(y), grid, terms)
    for m in (1, 2, 3):
        p_lo, p_hi = power_enclosure(a_lo, a_hi, m, grid)
        assert lo[m] <= p_lo * (1 << bits) and p_hi * (1 << bits) <= hi[m], m
        assert hi[m] - lo[m] <= 4 * m, m


def test_the_bits_settling_a_long_tie_are_exact() -> None:
    """The bits a tie is settled against, 1024 of them (a tie over 15 words), are
    floor(2^1024 F(k)) and floor(2^1024 (1 - a^(j+1))) exactly, against rational
    arithmetic, inside the table, at its ends and past them. Not statistical."""
    sampler = ExactSampler(0.44, 1)
    for k in (sampler.low - 2, sampler.low, -1, 0, 3, sampler.high):
        assert sampler._cdf_bits(k, 1024) == exact_threshold(sampler, k, 1024), k
    for j in (0, 5, sampler.geometric.thresholds.size):
        assert sampler._geometric_bits(j, 1024) == exact_geometric_threshold(sampler, j, 1024), j
