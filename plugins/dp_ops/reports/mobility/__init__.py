"""The Community Mobility Report pipeline (SPEC section 4): pure step functions."""
