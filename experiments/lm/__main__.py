"""`python -m experiments.lm train --out OUT [...]`,
`python -m experiments.lm sample --run OUT [...]` and
`python -m experiments.lm export --run OUT --format stablehlo|onnx [--step]`.

The command line is parsed first: `--help` and a bad flag answer before JAX is imported.
From the first line on, a signal ends the process at once in one line, until the
trainer's own handlers take over (and after them): a `KeyboardInterrupt` raised while
JAX loads could land where Python only prints "Exception ignored", and the start-up went
on."""

if __name__ == "__main__":
    from ..runs.signals import exit_on_signal

    with exit_on_signal("run the same command again"):
        import time

        from ..runs.timing import process_age
        from .cli import parse_args

        started = time.monotonic() - process_age()
        args = parse_args()
        from .train import main

        code = main(args, started=started, hard_abort=True)
    raise SystemExit(code)
