"""The demo country: a synthetic generator that writes the input contract with its known
truth, and the evaluation of releases against that truth. Never imported by ``dp_ops``."""
