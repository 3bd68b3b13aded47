"""The user-facing tile op namespace: thin functions that check their operands and record IR."""
from .declare import rt, rv, st, sv, col_vec, row_vec
from .memory import load, store, store_add, load_async, load_async_wait, Scope
from .elementwise import (fill, zero, one, neg_infty, pos_infty, copy,
                          exp, exp2, log, log2, abs, relu, neg, add, sub, mul, div, max, min,
                          sqrt, rsqrt, sigmoid, tanh, pow, log1p, erf)
from .vector_reduce import sum, amax, amin, segment_max, segment_sum  # noqa: A004 - tk.sum, as torch.sum
from .reduce import (row_max, row_min, row_sum, row_prod, col_max, col_min, col_sum, col_prod,
                     add_row, sub_row, mul_row, div_row, add_col, sub_col, mul_col, div_col)
from .mma import mma_AB, mma_ABt, mma_AtB, mma_AtBt
from .layout import swap_layout, swap_pairs, transpose
from .rotary import load_rotary_table, rotate_half
from .views import subtile, subvec
from .maps import map, broadcast_row, broadcast_col
from . import foreign  # noqa: F401 - installs what Python's math, numpy and torch functions do to traced values
from .softmax import OnlineSoftmax, online_softmax, online_softmax_stale
from .masks import (make_causal, make_causal_t, mask_scores, tril, tril_periodic, triu, left_fill, right_fill,
                    index_fill, upper_fill, lower_fill)
from .sync import sync, warp_sync, mark

from .sync_async import (semaphore, init_semaphore, arrive, expect_bytes, wait, fence_proxy_async, threadfence,
                         named_sync, named_arrive,
                         producer_registers, consumer_registers)
from .atomic import atomic_add, last_block
from .signal import signal, wait_signal
from . import cluster, tma
from .warpgroup import warpgroup, warpgroup_id

block = Scope("block")
