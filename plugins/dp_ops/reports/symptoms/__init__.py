"""The Search Trends Symptoms dataset (SPEC section 5)."""
