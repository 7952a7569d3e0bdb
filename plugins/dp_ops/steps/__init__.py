"""Report-agnostic step bodies: ingest, bound, noise, gate (the Great Expectations runner),
release, and the release page with its charts. Each report plugs its own parts in."""
