"""eqx_lru: Linear Recurrent Units in Equinox, in complex-diagonal and real-Jordan form."""

from ._version import package_version as _package_version

# isort: split
# The layers, their initialisation and conversion between forms
from ._cores._block_diagonal import BlockDiagonalLRU as BlockDiagonalLRU
from ._cores._convert import to_complex as to_complex
from ._cores._convert import to_real as to_real
from ._cores._core import AbstractRecurrentCore as AbstractRecurrentCore
from ._cores._init import ring_init as ring_init
from ._cores._lru import AbstractLRU as AbstractLRU
from ._cores._lru import ComplexLRU as ComplexLRU
from ._cores._lru import RealLRU as RealLRU
from ._cores._rglru import RGLRU as RGLRU
from ._cores._selective import ComplexSelectiveLRU as ComplexSelectiveLRU
from ._cores._selective import RealSelectiveLRU as RealSelectiveLRU

# isort: split
# Blocks, models and their pieces
from ._blocks._abstract_block import AbstractBlock as AbstractBlock
from ._blocks._abstract_block import AbstractStreamingBlock as AbstractStreamingBlock
from ._blocks._block import LRUBlock as LRUBlock
from ._blocks._glu import GLU as GLU
from ._blocks._hawk import HawkBlock as HawkBlock
from ._blocks._norm import MaskedBatchNorm as MaskedBatchNorm
from ._models._model import LRUModel as LRUModel
from ._models._pool import StreamPool as StreamPool
from ._models._retrieval import LRURetrievalModel as LRURetrievalModel
from ._padding import valid_mask as valid_mask
from ._padding import where_valid as where_valid

# isort: split
# Training
from ._training._optim import lru_optimizer as lru_optimizer
from ._training._optim import lru_param_labels as lru_param_labels
from ._training._optim import lru_schedule as lru_schedule
from ._training._train import predict as predict
from ._training._train import train_step as train_step

# isort: split
# The linear-recurrence scan: algebras and methods
from ._scan._algebra import AbstractAlgebra as AbstractAlgebra
from ._scan._algebra import Block2x2 as Block2x2
from ._scan._algebra import DenseAlgebra as DenseAlgebra
from ._scan._algebra import Diagonal as Diagonal
from ._scan._algebra import RotationScaling as RotationScaling
from ._scan._methods import AbstractScanMethod as AbstractScanMethod
from ._scan._methods import Associative as Associative
from ._scan._methods import Auto as Auto
from ._scan._methods import Sequential as Sequential
from ._scan._pallas import PallasScan as PallasScan
from ._scan._recurrence import linear_recurrence as linear_recurrence
from ._scan._sequence_parallel import SequenceParallel as SequenceParallel

# isort: split
# Subpackages: the paper's ablation ladder, the baseline cores (S4D, S5, LDS), export
from . import ablation as ablation
from . import baselines as baselines
from . import export as export
from . import recurrentgemma as recurrentgemma

__all__ = [
    "AbstractAlgebra",
    "AbstractBlock",
    "AbstractLRU",
    "AbstractRecurrentCore",
    "AbstractScanMethod",
    "AbstractStreamingBlock",
    "Associative",
    "Auto",
    "Block2x2",
    "BlockDiagonalLRU",
    "ComplexLRU",
    "ComplexSelectiveLRU",
    "DenseAlgebra",
    "Diagonal",
    "GLU",
    "HawkBlock",
    "LRUBlock",
    "LRUModel",
    "LRURetrievalModel",
    "MaskedBatchNorm",
    "PallasScan",
    "RGLRU",
    "RealLRU",
    "RealSelectiveLRU",
    "RotationScaling",
    "SequenceParallel",
    "Sequential",
    "StreamPool",
    "ablation",
    "baselines",
    "export",
    "linear_recurrence",
    "lru_optimizer",
    "lru_param_labels",
    "lru_schedule",
    "predict",
    "recurrentgemma",
    "ring_init",
    "to_complex",
    "to_real",
    "train_step",
    "valid_mask",
    "where_valid",
]

__version__ = _package_version()
