"""`python -m experiments.export --run OUT --format stablehlo|onnx [--step]`."""

from ._cli import _parser as _parser  # noqa: F401  (the flag tests walk every command's parser)
from ._cli import main

if __name__ == "__main__":
    from experiments.runs.signals import exit_on_signal

    with exit_on_signal("run the same command again"):  # a signal: one line, status 130
        code = main()
    raise SystemExit(code)
