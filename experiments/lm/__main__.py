"""`python -m experiments.lm train --out OUT [...]` and
`python -m experiments.lm sample --run OUT [...]`."""

import time

from ..lra._timing import process_age
from .train import main

if __name__ == "__main__":
    raise SystemExit(main(started=time.monotonic() - process_age(), hard_abort=True))
