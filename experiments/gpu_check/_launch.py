"""`python -m experiments.gpu_check._launch PARENT_PID CMD...`: ask the kernel to kill this
process when its parent dies (`PR_SET_PDEATHSIG`, kept across `exec`), then become CMD.

Every child of the check starts through it rather than through a `preexec_fn`, which would
make `subprocess` fork the check's process the slow way, with its fork handlers (JAX warns
there, and the test suite turns warnings into errors)."""

import os
import sys

from ._jobs import die_with_parent


def main(argv: list[str]) -> None:
    parent, cmd = int(argv[0]), argv[1:]
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the request took effect
        raise SystemExit(1)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
