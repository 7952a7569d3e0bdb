"""The Community Mobility Report pipeline (docs/design.md, Mobility report): pure step
functions."""
