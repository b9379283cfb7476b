"""The blocks and their parts: the block contracts, `LRUBlock` and `HawkBlock`, the
GLU, the batch norm, the convolution and gated MLP, and the prologue every call shares."""
