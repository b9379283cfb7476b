"""`python -m experiments.gpu_check`: see the package docstring."""

from ._cli import main

if __name__ == "__main__":
    from experiments.runs.signals import exit_on_signal

    with exit_on_signal("run the same command again"):  # a signal: one line, status 130
        code = main()
    raise SystemExit(code)
