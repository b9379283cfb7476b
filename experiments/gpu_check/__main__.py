"""`python -m experiments.gpu_check`: see the package docstring."""

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
