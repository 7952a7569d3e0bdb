"""The raw sources the factory ingests, each a :class:`~dp_ops.sources.spec.SourceSpec`
registered under the entry-point group ``dp_ops.sources``: the location history and the
search activity here, and any source an agency's own package declares."""
