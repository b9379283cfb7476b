"""`python -m experiments.lm train --out OUT [...]`,
`python -m experiments.lm sample --run OUT [...]` and
`python -m experiments.lm export --run OUT --format stablehlo|onnx [--step]`."""

import time

from ..runs.timing import process_age
from .train import main

if __name__ == "__main__":
    raise SystemExit(main(started=time.monotonic() - process_age(), hard_abort=True))
