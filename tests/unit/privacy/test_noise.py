"""Discrete Laplace noise (dp_ops.privacy.noise): the sampler follows the exact law, intervals are
the exact discrete ones, and every cell is noised from a CSPRNG.

False failures. Every statistical test here draws from ``noise_generator(key=...)`` with a
fixed key, so it is deterministic: it passes or fails the same way on every run. The
thresholds are still chosen as if the randomness were fresh, so that a correct sampler
would fail *any* key with probability below one in a million for the whole file:

- chi-square goodness of fit: reject at p < 1e-7 (``P_REJECT``), i.e. a false-failure
  rate of 1e-7 per (epsilon, sensitivity) case, 4e-7 for the four cases together;
- mean and variance: accept within 8 standard errors, computed from the exact moments of
  the law; by the CLT (and Cramer's moderate-deviation theorem at n = 10^6, whose
  correction at 8 SE is a factor O(1)) a correct sampler falls outside with probability
  ~1e-15 per check;
- share of cells left unchanged: an exact binomial interval with 1e-8 in each tail,
  2e-8 per case, 6e-8 for the three cases;
- two unkeyed generators agreeing on 256 bits: 2^-256.

Total for the file under fresh randomness: about 5e-7.

The power tests show that the same chi-square test does reject wrong laws (wrong epsilon,
wrong sensitivity, rounded continuous Laplace), so it can fail.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from randomgen import AESCounter
from scipy import stats

from dp_ops.privacy import noise
from dp_ops.privacy.noise import (
    add_discrete_laplace,
    discrete_laplace_a,
    discrete_laplace_margin,
    discrete_laplace_pmf,
    discrete_laplace_tail,
    noise_generator,
    sample_discrete_laplace,
)

TEST_KEY = 0x5EED_2020_0301  # tests only: production keys come from `secrets`
N_SAMPLES = 1_000_000
P_REJECT = 1e-7  # false-failure rate of one chi-square test under fresh randomness
MIN_EXPECTED = 20  # pooled so every bin expects >= 20 (Cochran asks >= 5): keeps the
# chi-square approximation good far out in its tail, where P_REJECT sits
SE_BOUND = 8.0  # mean/variance tolerance in standard errors (~1e-15 two-sided)

# (epsilon, sensitivity, bin width): sensitivity 720 is the minutes-per-day grid; its
# scale b = 720 / 0.22 ~ 3300, so it is binned into ranges of 250 integers.
CASES = [(0.44, 1, 1), (0.22, 1, 1), (1.0, 1, 1), (0.22, 720, 250)]
CASE_IDS = [f"eps{e}-sens{s}" for e, s, _ in CASES]


@functools.cache
def _samples(epsilon: float, sensitivity: int, key: int = TEST_KEY) -> NDArray[np.int64]:
    rng = noise_generator(key=key)
    return sample_discrete_laplace(N_SAMPLES, epsilon=epsilon, sensitivity=sensitivity,
                                   rng=rng)


def _bins(n: int, epsilon: float, sensitivity: int, width: int
          ) -> tuple[int, NDArray[np.int64], NDArray[np.float64]]:
    """Bins for a chi-square test of ``n`` draws, with exact probabilities from the module's
    pmf and tail: (-inf, -K-1], width-``width`` ranges covering [-K, K], [K+1, inf).

    Returns (K, start offsets of the interior bins within [-K, K], probabilities with the
    low tail first and the high tail last).
    """
    kw: dict[str, Any] = {"epsilon": epsilon, "sensitivity": sensitivity}
    # P(Z > K) = tail(K) / 2 by symmetry; K is the largest value whose pooled one-sided
    # tail still expects MIN_EXPECTED draws.
    ms = np.arange(0, 200 * sensitivity * math.ceil(1 / epsilon) + 1)
    # the closed form broadcasts over an array of m
    one_sided = np.asarray(discrete_laplace_tail(ms, **kw)) / 2  # type: ignore[arg-type]
    big_k = int(ms[n * one_sided >= MIN_EXPECTED].max())
    while True:
        ks = np.arange(-big_k, big_k + 1)
        pmf = discrete_laplace_pmf(ks, **kw)
        starts = np.arange(0, ks.size, width)
        if ks.size - starts[-1] < width // 2:  # a sliver at the end joins its neighbour
            starts = starts[:-1]
        interior = np.add.reduceat(pmf, starts)
        if n * min(interior[0], interior[-1]) >= MIN_EXPECTED:
            break
        big_k -= max(1, width // 2)  # pool the sparse outermost values into the tails
    tail = float(one_sided[big_k])
    probs = np.concatenate([[tail], interior, [tail]])
    # the pmf and the tail must describe the same law
    assert probs.sum() == pytest.approx(1.0, abs=1e-9)
    assert (n * probs >= MIN_EXPECTED).all(), "binning is too fine for n"
    return big_k, starts, probs


def _chi_square_pvalue(x: NDArray[np.int64], epsilon: float, sensitivity: int,
                       width: int) -> float:
    """p-value of the chi-square goodness of fit of ``x`` to DiscreteLaplace(eps, sens)."""
    big_k, starts, probs = _bins(x.size, epsilon, sensitivity, width)
    inside = x[(x >= -big_k) & (x <= big_k)]
    per_value = np.bincount(inside + big_k, minlength=2 * big_k + 1)
    observed = np.concatenate([[np.sum(x < -big_k)], np.add.reduceat(per_value, starts),
                               [np.sum(x > big_k)]])
    assert observed.sum() == x.size
    expected = x.size * probs / probs.sum()
    return float(stats.chisquare(observed, expected).pvalue)


# -- the law --------------------------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "sensitivity", "width"), CASES, ids=CASE_IDS)
def test_samples_fit_the_exact_pmf(epsilon: float, sensitivity: int, width: int) -> None:
    # False-failure rate P_REJECT = 1e-7 per case under fresh randomness; 0 with TEST_KEY.
    p = _chi_square_pvalue(_samples(epsilon, sensitivity), epsilon, sensitivity, width)
    assert p >= P_REJECT, f"chi-square p = {p:.3g}: samples do not follow the pmf"


@pytest.mark.parametrize(("epsilon", "sensitivity", "width"), CASES, ids=CASE_IDS)
def test_mean_is_zero_and_variance_is_exact(epsilon: float, sensitivity: int,
                                             width: int) -> None:
    x = _samples(epsilon, sensitivity).astype(np.float64)
    a = discrete_laplace_a(epsilon, sensitivity)
    var = 2 * a / (1 - a) ** 2
    # exact moments from scipy's independent implementation of the same law
    ref_var, ref_kurt = stats.dlaplace.stats(epsilon / sensitivity, moments="vk")
    assert var == pytest.approx(float(ref_var), rel=1e-9)
    mu4 = (float(ref_kurt) + 3) * var**2
    n = x.size
    se_mean = math.sqrt(var / n)
    se_var = math.sqrt((mu4 - var**2) / n)  # standard error of the sample variance
    # 8 standard errors each: ~1e-15 false-failure rate per check (see module docstring)
    assert abs(x.mean()) <= SE_BOUND * se_mean
    assert abs(x.var() - var) <= SE_BOUND * se_var


# -- power: the same test rejects wrong laws -------------------------------------------------


def test_chi_square_rejects_the_wrong_epsilon() -> None:
    # eps 0.44 drawn, eps 0.6 claimed: noncentrality ~1.6e5 at n = 10^6 against a
    # rejection threshold of ~100 (33 bins), so this fails to reject for no key.
    p = _chi_square_pvalue(_samples(0.44, 1), 0.6, 1, 1)
    assert p < P_REJECT


def test_chi_square_rejects_the_wrong_sensitivity() -> None:
    # sensitivity 720 drawn, 700 claimed (a 3% too small scale): noncentrality ~820 at
    # n = 10^6 (189 bins), statistic ~1000 +/- 60 against a threshold of ~320 at
    # P_REJECT; the probability that another key would not reject is ~1e-25.
    p = _chi_square_pvalue(_samples(0.22, 720), 0.22, 700, 250)
    assert p < P_REJECT


def test_chi_square_rejects_rounded_continuous_laplace() -> None:
    # The mechanism this module replaces: round(Laplace(1/eps)) puts 1 - e^(-eps/2) = 0.197
    # of its mass on 0 where the discrete law puts tanh(eps/2) = 0.216; at n = 10^6 that
    # alone is a noncentrality of ~1700.
    rng = np.random.Generator(AESCounter(key=TEST_KEY))
    x = np.rint(rng.laplace(scale=1 / 0.44, size=N_SAMPLES)).astype(np.int64)
    p = _chi_square_pvalue(x, 0.44, 1, 1)
    assert p < P_REJECT


# -- pmf and tail against an independent implementation --------------------------------------


@pytest.mark.parametrize(("epsilon", "sensitivity"), [(0.44, 1), (1.0, 1), (0.22, 720),
                                                      (5.0, 3)])
def test_pmf_and_tail_match_scipy(epsilon: float, sensitivity: int) -> None:
    ref = stats.dlaplace(epsilon / sensitivity)
    ks = np.arange(-50 * sensitivity, 50 * sensitivity + 1)
    np.testing.assert_allclose(discrete_laplace_pmf(ks, epsilon=epsilon,
                                                    sensitivity=sensitivity),
                               ref.pmf(ks), rtol=1e-10)
    for m in (0, 1, 2, 7, 10 * sensitivity):
        assert discrete_laplace_tail(m, epsilon=epsilon, sensitivity=sensitivity) == \
            pytest.approx(2 * ref.sf(m), rel=1e-9)


@pytest.mark.parametrize("bad", [0.0, -0.1, math.inf, math.nan])
def test_rejects_bad_epsilon(bad: float) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        sample_discrete_laplace(3, epsilon=bad, sensitivity=1, rng=noise_generator(key=1))
    with pytest.raises(ValueError, match="epsilon"):
        discrete_laplace_pmf(0, epsilon=bad, sensitivity=1)


def test_rejects_an_epsilon_per_sensitivity_above_700() -> None:
    """Above 700 the noise is zero at any precision (and the exact sampler's expansions
    would run for minutes): refused with both parameters named; 700 itself is taken."""
    msg = ("epsilon=1400.5, sensitivity=2: epsilon / sensitivity must be at most 700 "
           "(beyond it the noise is zero: no privacy)")
    with pytest.raises(ValueError) as err:
        sample_discrete_laplace(3, epsilon=1400.5, sensitivity=2, rng=noise_generator(key=1))
    assert str(err.value) == msg
    with pytest.raises(ValueError, match="at most 700"):
        discrete_laplace_pmf(0, epsilon=1e6, sensitivity=1)
    draws = sample_discrete_laplace(1000, epsilon=1400.0, sensitivity=2,
                                    rng=noise_generator(key=1))
    assert not draws.any()  # P(Z != 0) = 2 exp(-700) / (1 + exp(-700))


def test_rejects_bad_sensitivity() -> None:
    with pytest.raises(ValueError, match="sensitivity"):
        sample_discrete_laplace(3, epsilon=1.0, sensitivity=0, rng=noise_generator(key=1))


# -- margins ---------------------------------------------------------------------------------

ALPHAS = [0.5, 0.2, 0.1, 0.05, 0.01, 1e-3, 1e-6, 1e-12]
EPS_SENS = [(0.05, 1), (0.22, 1), (0.44, 1), (1.0, 1), (3.0, 1), (0.22, 720), (2.0, 60)]


@pytest.mark.parametrize(("epsilon", "sensitivity"), EPS_SENS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_margin_is_the_smallest_m_with_tail_at_most_alpha(alpha: float, epsilon: float,
                                                          sensitivity: int) -> None:
    kw: dict[str, Any] = {"epsilon": epsilon, "sensitivity": sensitivity}
    m = discrete_laplace_margin(alpha, **kw)
    assert isinstance(m, int) and m >= 0
    assert discrete_laplace_tail(m, **kw) <= alpha
    if m > 0:  # P(|Z| > -1) = 1 > alpha, so m = 0 needs no lower check
        assert discrete_laplace_tail(m - 1, **kw) > alpha
    # Google's DP library interval for continuous Laplace of scale b: b ln(1/alpha). The
    # discrete margin is ceil(b ln(1/alpha) + c) - 1 with c = b ln(2/(1+a)) in (0, 1/2].
    b = sensitivity / epsilon
    assert b * math.log(1 / alpha) - 1 <= m <= b * math.log(1 / alpha) + 1


@settings(max_examples=300, deadline=None)
@given(alpha=st.floats(1e-15, 0.999), epsilon=st.floats(0.01, 20.0),
       sensitivity=st.integers(1, 10_000))
def test_margin_property(alpha: float, epsilon: float, sensitivity: int) -> None:
    """The grid above over the range of scales b = sensitivity/epsilon <= 1e6 (minutes of
    a day at epsilon 0.01 is b = 1.4e5). Beyond, see test_margin_at_huge_scales."""
    kw: dict[str, Any] = {"epsilon": epsilon, "sensitivity": sensitivity}
    m = discrete_laplace_margin(alpha, **kw)
    assert discrete_laplace_tail(m, **kw) <= alpha
    assert m == 0 or discrete_laplace_tail(m - 1, **kw) > alpha
    b = sensitivity / epsilon
    assert b * math.log(1 / alpha) - 1 <= m <= b * math.log(1 / alpha) + 1


def _exact_tail(m: int, epsilon: float, sensitivity: int) -> Decimal:
    """P(|Z| > m) in 50-digit decimal arithmetic, as exp(-(m+1) x) with x = eps/sens."""
    with localcontext() as ctx:
        ctx.prec = 50
        x = Decimal(epsilon) / Decimal(sensitivity)
        return 2 * (-(x * (m + 1))).exp() / (1 + (-x).exp())


@pytest.mark.parametrize(("epsilon", "sensitivity", "alpha"), [
    (0.22, 720, 0.05), (0.22, 720, 1e-6), (0.05, 1440, 0.05), (0.01, 1440, 1e-6),
    (0.44, 1, 0.05), (1.0, 1, 0.01),
    pytest.param(0.001, 65535, 0.0078125, id="huge-scale"),
])
def test_margin_matches_exact_arithmetic(epsilon: float, sensitivity: int,
                                         alpha: float) -> None:
    m = discrete_laplace_margin(alpha, epsilon=epsilon, sensitivity=sensitivity)
    assert _exact_tail(m, epsilon, sensitivity) <= Decimal(alpha)
    assert m == 0 or _exact_tail(m - 1, epsilon, sensitivity) > Decimal(alpha)


@pytest.mark.parametrize(("epsilon", "sensitivity"), EPS_SENS)
def test_margin_is_exact_at_the_boundary(epsilon: float, sensitivity: int) -> None:
    # alpha equal to a tail probability: tail(m) <= alpha holds with equality, so that m
    # (not m + 1) is the answer; this is where a closed form alone rounds the wrong way.
    kw: dict[str, Any] = {"epsilon": epsilon, "sensitivity": sensitivity}
    for m in (0, 1, 2, 5, 17, 100):
        alpha = discrete_laplace_tail(m, **kw)
        if not 0 < alpha < 1:
            continue
        assert discrete_laplace_margin(alpha, **kw) == m


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5])
def test_margin_rejects_alpha_outside_0_1(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        discrete_laplace_margin(alpha, epsilon=1.0, sensitivity=1)


# -- adding noise to cells -------------------------------------------------------------------


@pytest.mark.parametrize("values", [np.array([1.0, 2.0]), np.array([1, 2], dtype=np.float32),
                                    [0.5, 1.5], np.array([True, False])])
def test_add_rejects_non_integer_input(values: object) -> None:
    with pytest.raises(TypeError):
        add_discrete_laplace(values, epsilon=1.0, sensitivity=1,  # type: ignore[arg-type]
                             rng=noise_generator(key=1))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.uint8, np.uint32])
def test_add_returns_int64_of_the_same_shape(dtype: type) -> None:
    values: NDArray[Any] = np.arange(12, dtype=dtype).reshape(3, 4)
    out = add_discrete_laplace(values, epsilon=1.0, sensitivity=1, rng=noise_generator(key=1))
    assert out.dtype == np.int64
    assert out.shape == (3, 4)


@pytest.mark.parametrize("true_value", [0, 7, 100_000])
def test_add_noises_every_cell_including_zeros(true_value: int) -> None:
    # Of 10k cells, the number left exactly at their true value is Binomial(10^4, pmf(0)),
    # pmf(0) = tanh(0.22) = 0.216; a sampler that skipped zero cells (or any cells) would
    # leave far more. Exact binomial interval, 1e-8 per side: false-failure rate 2e-8.
    n, epsilon = 10_000, 0.44
    values = np.full(n, true_value, dtype=np.int64)
    out = add_discrete_laplace(values, epsilon=epsilon, sensitivity=1,
                               rng=noise_generator(key=TEST_KEY + true_value))
    p0 = float(discrete_laplace_pmf(0, epsilon=epsilon, sensitivity=1))
    unchanged = int(np.sum(out == values))
    assert stats.binom.ppf(1e-8, n, p0) <= unchanged <= stats.binom.isf(1e-8, n, p0)


def test_noise_does_not_depend_on_the_values() -> None:
    # Same generator state, different true values: the same noise is added, so nothing but
    # the sum out = value + Z reaches the output (no data-dependent rounding or clipping).
    values = np.array([[0, 0, 5], [1_000_000, 3, 0]], dtype=np.int64)
    out = add_discrete_laplace(values, epsilon=0.5, sensitivity=2,
                               rng=noise_generator(key=TEST_KEY))
    zeros = add_discrete_laplace(np.zeros_like(values), epsilon=0.5, sensitivity=2,
                                 rng=noise_generator(key=TEST_KEY))
    np.testing.assert_array_equal(out - values, zeros)


# -- the random source ------------------------------------------------------------------------


def test_generator_is_aes_counter() -> None:
    assert isinstance(noise_generator().bit_generator, AESCounter)
    assert isinstance(noise_generator(key=1).bit_generator, AESCounter)


def test_unkeyed_generators_give_different_streams() -> None:
    # 256 bits each: equal by chance with probability 2^-256.
    a = noise_generator().integers(0, 2**63, size=4)
    b = noise_generator().integers(0, 2**63, size=4)
    assert not np.array_equal(a, b)


def test_unkeyed_generator_takes_a_128_bit_key_from_secrets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fake_randbits(k: int) -> int:
        calls.append(k)
        return 0xC0FFEE

    monkeypatch.setattr(noise.secrets, "randbits", fake_randbits)
    unkeyed = noise_generator().integers(0, 2**63, size=4)
    monkeypatch.undo()
    assert calls == [128]
    np.testing.assert_array_equal(unkeyed,
                                  noise_generator(key=0xC0FFEE).integers(0, 2**63, size=4))


def test_keyed_generator_is_reproducible_and_keys_differ() -> None:
    def draw(key: int) -> NDArray[np.int64]:
        return sample_discrete_laplace(64, epsilon=1.0, sensitivity=1,
                                       rng=noise_generator(key=key))

    np.testing.assert_array_equal(draw(TEST_KEY), draw(TEST_KEY))
    assert not np.array_equal(draw(TEST_KEY), draw(TEST_KEY + 1))


def test_add_discrete_laplace_adds_exactly_the_drawn_noise() -> None:
    """The noisy values are the values plus the sampler's draws, in order and shape (a
    keyed generator makes both sides the same stream; the noise being symmetric, no
    statistical test could tell plus from minus). Not statistical."""
    from dp_ops.privacy.noise import add_discrete_laplace, noise_generator, sample_discrete_laplace

    values = np.arange(12, dtype=np.int32).reshape(3, 4) * 100
    noisy = add_discrete_laplace(values, epsilon=0.3, sensitivity=2, rng=noise_generator(key=11))
    z = sample_discrete_laplace(12, epsilon=0.3, sensitivity=2, rng=noise_generator(key=11))
    assert noisy.dtype == np.int64 and noisy.shape == (3, 4)
    assert noisy.tolist() == (values.astype(np.int64) + z.reshape(3, 4)).tolist()
    unsigned = add_discrete_laplace(np.array([5], np.uint8), epsilon=0.3, sensitivity=2,
                                    rng=noise_generator(key=11))
    assert unsigned.tolist() == [5 + int(z[0])]
    with pytest.raises(TypeError) as err:
        add_discrete_laplace(np.array([0.5]), epsilon=0.3, sensitivity=2,
                             rng=noise_generator(key=11))
    assert str(err.value) == ("values must be integers (got dtype float64); put real values "
                              "on an integer grid first")


@pytest.mark.parametrize(("epsilon", "sensitivity"), [(0.1, 1), (0.44, 1), (0.22, 720),
                                                      (5.0, 1)])
def test_margin_is_the_smallest_m_at_every_boundary(epsilon: float, sensitivity: int) -> None:
    """discrete_laplace_margin(alpha) is the smallest m >= 0 with P(|Z| > m) <= alpha, found
    here by counting up, for alpha exactly at each tail value and one float either side
    (where the closed form's rounding sends it to its correcting loops, up or down)."""
    from dp_ops.privacy.noise import discrete_laplace_margin, discrete_laplace_tail

    def tail(m: int) -> float:
        return float(discrete_laplace_tail(m, epsilon=epsilon, sensitivity=sensitivity))

    def smallest(alpha: float, near: int) -> int:
        m = max(0, near - 3)            # counting up from below the answer
        assert m == 0 or tail(m - 1) > alpha
        while tail(m) > alpha:
            m += 1
        return m

    ms = range(0, 40) if sensitivity == 1 else range(0, 40 * 720, 719)
    for m in ms:
        t = tail(m)
        for alpha in (t, math.nextafter(t, 0), math.nextafter(t, 1)):
            if 0 < alpha < 1:
                got = discrete_laplace_margin(alpha, epsilon=epsilon, sensitivity=sensitivity)
                assert got == smallest(alpha, m), (m, alpha)
    if epsilon == 5.0:  # a wide alpha: no margin at all
        assert discrete_laplace_margin(0.9, epsilon=5.0, sensitivity=1) == 0
