"""`python -m experiments.export --run OUT --format stablehlo|onnx [--step]`."""

from . import main

if __name__ == "__main__":
    raise SystemExit(main())
