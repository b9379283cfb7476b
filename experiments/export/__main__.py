"""`python -m experiments.export --run OUT --format stablehlo|onnx [--step]`."""

from ._cli import _parser as _parser  # noqa: F401  (the flag tests walk every command's parser)
from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
