"""The Search Trends Symptoms dataset (docs/design.md, Symptoms dataset)."""
