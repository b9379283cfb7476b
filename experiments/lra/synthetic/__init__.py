"""Data in the official LRA files' formats, generated offline: ListOps expressions
(`listops.py`, the LRA generator), Pathfinder images (`pathfinder.py`, a simplified
generator) and random Text, Retrieval and Image documents (`documents.py`). Each task's
record (`experiments/lra/tasks.py`, its `synthetic`) names its writer (`writers.py`);
`python -m experiments.lra.generate` is the command line of the first two."""

from .documents import write_image_task as write_image_task
from .documents import write_retrieval_task as write_retrieval_task
from .documents import write_text_task as write_text_task
from .listops import OPERATORS as OPERATORS
from .listops import Tree as Tree
from .listops import evaluate_listops as evaluate_listops
from .listops import evaluate_listops_tree as evaluate_listops_tree
from .listops import generate_listops as generate_listops
from .listops import listops_split_sizes as listops_split_sizes
from .listops import random_listops_tree as random_listops_tree
from .listops import serialize_listops as serialize_listops
from .listops import write_listops as write_listops
from .pathfinder import PathfinderParams as PathfinderParams
from .pathfinder import PathfinderSample as PathfinderSample
from .pathfinder import generate_pathfinder_image as generate_pathfinder_image
from .pathfinder import pathfinder_params as pathfinder_params
from .pathfinder import write_pathfinder as write_pathfinder
from .writers import image_data as image_data
from .writers import listops_data as listops_data
from .writers import pathfinder_data as pathfinder_data
from .writers import retrieval_data as retrieval_data
from .writers import text_data as text_data

__all__ = [
    "OPERATORS",
    "Tree",
    "random_listops_tree",
    "serialize_listops",
    "evaluate_listops_tree",
    "evaluate_listops",
    "generate_listops",
    "listops_split_sizes",
    "write_listops",
    "PathfinderParams",
    "PathfinderSample",
    "pathfinder_params",
    "generate_pathfinder_image",
    "write_pathfinder",
    "write_text_task",
    "write_retrieval_task",
    "write_image_task",
    "listops_data",
    "text_data",
    "retrieval_data",
    "image_data",
    "pathfinder_data",
]
