"""Speed of the exact discrete Laplace sampler (dp_ops.privacy.noise.ExactSampler).

Prints samples per second on one core for each epsilon / sensitivity the reports use,
beside the peer measured in the same run: numpy's floating-point geometric difference
over the same AES-CTR generator (not exact). Run:
``.venv/bin/python benchmarks/sampler.py`` (``make bench`` runs it too).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from dp_ops.privacy.noise import exact_sampler, noise_generator

# (epsilon, sensitivity) of every noised cell of the default configurations: mobility
# places/workplaces 0.44, residential sum 0.22/720, residential count and contributors
# 0.22; symptoms A cells 0.1493 and B 0.112
PARAMETERS = ((0.44, 1), (0.22, 1), (0.1493, 1), (0.112, 1), (0.22, 720))


def numpy_geometric(size: int, epsilon: float, sensitivity: int,
                    rng: np.random.Generator) -> np.ndarray:
    p = -np.expm1(-epsilon / sensitivity)
    return rng.geometric(p, size) - rng.geometric(p, size)


def best_rate(draw: Callable[[int], object], size: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        draw(size)
        best = min(best, time.perf_counter() - start)
    return size / best


def rates(epsilon: float, sensitivity: int, size: int, repeats: int) -> tuple[float, float]:
    """(exact, numpy float) samples per second, each on its own keyed generator."""
    sampler = exact_sampler(epsilon, sensitivity)
    exact_rng = noise_generator(key=2020)
    peer_rng = noise_generator(key=2021)
    exact = best_rate(lambda n: sampler.sample(n, exact_rng), size, repeats)
    peer = best_rate(lambda n: numpy_geometric(n, epsilon, sensitivity, peer_rng), size,
                     repeats)
    return exact, peer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"exact discrete Laplace sampler, {args.size:,} draws, best of {args.repeats}, "
          "one core")
    print(f"{'epsilon/sensitivity':>22} {'exact M/s':>10} {'numpy float M/s':>16} "
          f"{'ratio':>6} {'table build s':>14}")
    for epsilon, sensitivity in PARAMETERS:
        start = time.perf_counter()
        exact_sampler(epsilon, sensitivity)
        build = time.perf_counter() - start
        exact, peer = rates(epsilon, sensitivity, args.size, args.repeats)
        label = f"{epsilon}/{sensitivity}"
        print(f"{label:>22} {exact / 1e6:>10.1f} {peer / 1e6:>16.1f} "
              f"{exact / peer:>6.2f} {build:>14.2f}")


if __name__ == "__main__":
    main()
