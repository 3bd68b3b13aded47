"""Block templates: the author writes load / compute / finish (and store); the template owns the pipeline."""
from .common import Namespace, multiprocessors
from .lcf import LCF, Task, lcf, shared
from .lcsf import LCSF, lcsf
from .schedule import Grouped, SplitK, causal_pairs_order, grouped_order, head_sections_order
from .query_tiles import QueryTiles
from .task_inputs import TASK_LOADS
from .warpgroups import Turns, own_barrier, own_sync, store_through
