"""Column names the symptoms modules share."""

from __future__ import annotations

# The noise parameters of a (region, symptom) value: A's and B's epsilon and sensitivity.
# Stored with every daily value so that the reliability rule and the weekly sums use the
# law each value was actually noised with.
NOISE_PARAMETERS: tuple[str, ...] = ("a_epsilon", "a_sensitivity", "b_epsilon", "b_sensitivity")
