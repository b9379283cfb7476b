"""The output helpers of `experiments/paper`, writing to `experiments/ldstack/figures/` by
default (the command line: `experiments/paper/command.py`)."""

from experiments.paper.command import LDSTACK_FIGURES as DEFAULT_OUT
from experiments.paper.common import plt, save_figure, save_json

__all__ = ["DEFAULT_OUT", "plt", "save_figure", "save_json"]
