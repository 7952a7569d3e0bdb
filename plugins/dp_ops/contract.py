"""The input contract's public facts: the raw sources under the data root and the stay
categories of the location history. Both reports and the ingest step rely on these."""

from __future__ import annotations

# The geographic levels of the region table: 0 country, 1 sub_region_1, 2 sub_region_2.
LEVELS: tuple[int, ...] = (0, 1, 2)
LEVEL_NAMES = {0: "country", 1: "sub_region_1", 2: "sub_region_2"}

# The raw sources: raw/<source>/date=YYYY-MM-DD/*.parquet
LOCATION_SOURCE = "location_history"
SEARCH_SOURCE = "search_activity"

# Source categories of the location history's place stays ...
PLACE_CATEGORIES: tuple[str, ...] = (
    "retail",
    "recreation",
    "eateries",
    "groceries",
    "pharmacies",
    "transit",
    "parks",
)
# ... and every category a stay may carry.
ALL_STAY_CATEGORIES: tuple[str, ...] = PLACE_CATEGORIES + ("residential", "workplace")
