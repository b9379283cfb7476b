"""eqx_lru: Linear Recurrent Units in Equinox, in complex-diagonal and real-Jordan form."""

from ._ablation import ABLATION_CORES as ABLATION_CORES
from ._ablation import AbstractDenseRNN as AbstractDenseRNN
from ._ablation import AbstractDiagonalRNN as AbstractDiagonalRNN
from ._ablation import DenseAlgebra as DenseAlgebra
from ._ablation import DenseRNN as DenseRNN
from ._ablation import DiagonalExp as DiagonalExp
from ._ablation import DiagonalRealImag as DiagonalRealImag
from ._ablation import DiagonalStableExp as DiagonalStableExp
from ._ablation import LinearDenseRNN as LinearDenseRNN
from ._ablation import to_diagonal as to_diagonal
from ._init import gamma_log_init as gamma_log_init
from ._init import lru_init as lru_init
from ._init import projection_init as projection_init
from ._init import ring_init as ring_init
from ._lru import AbstractLRU as AbstractLRU
from ._lru import ComplexLRU as ComplexLRU
from ._lru import RealLRU as RealLRU
from ._scan import AbstractAlgebra as AbstractAlgebra
from ._scan import Block2x2 as Block2x2
from ._scan import Diagonal as Diagonal
from ._scan import default_method as default_method
from ._scan import linear_recurrence as linear_recurrence

__version__ = "0.1.0"
