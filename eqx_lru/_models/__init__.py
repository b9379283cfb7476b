"""The models: `LRUModel` with its input, output and streaming, the stream pool and
the retrieval model."""
