"""`python -m experiments.lm train --out OUT [...]`,
`python -m experiments.lm sample --run OUT [...]` and
`python -m experiments.lm export --run OUT --format stablehlo|onnx [--step]`.

The command line is parsed first: `--help` and a bad flag answer before JAX is imported."""

import time

from ..runs.timing import process_age
from .cli import parse_args

if __name__ == "__main__":
    started = time.monotonic() - process_age()
    args = parse_args()
    from .train import main

    raise SystemExit(main(args, started=started, hard_abort=True))
