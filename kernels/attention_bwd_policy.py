"""The policy of attention's backward (kernels/attention_bwd_kernel.py, attention_bwd_dq_kernel.py): which options
(attention_bwd_config.AttentionBwdConfig) attention_backward runs for a head dim. Each table row carries its
evidence; tests/test_attention_bwd.py keeps a golden record of the choices.

The kernels take head dims in multiples of 32 (NATIVE_DIMS: the main kernel holds K, V, Q and dO in two column
pieces of d / 2, a multiple of 16); attention_backward runs the other multiples of 16 on zero columns padded up to
the next one (native_dim), which leave the scores and the row sums of dO * O as they are.

Head dims up to 128 accumulate dQ across key tiles with TMA reduce-adds into an fp32 workspace (FlashAttention-3's
way), unless deterministic=True; past 128 (dK and dV of a 64-row key unit no longer fit one warpgroup's registers in
full) each key tile's task computes dK and dV of one column piece (two tasks a key tile, S and dP computed by
both), and dQ comes from the separate pass (attention_bwd_dq_kernel), as it does for deterministic=True.
"""
from __future__ import annotations

from .op_support import Row
from .tensor_layout import cdiv

TUNED_DIMS = (64, 128, 256)         # head dims whose rows below were chosen; others take the next one up's (tuned)
MAX_DIM = 256
KEY_ROWS = 128                      # keys per task of the main kernel: 64 per consumer warpgroup (wgmma M)
DQ_TASK_ROWS = 128                  # query rows per task of the dQ pass: 64 per consumer warpgroup
LSE_ROWS = 128                      # the row vectors' (lse, D) and dQ workspace's rows are N rounded up to this
ATOMIC_DQ_DIMS = 128                # the head dims up to which the main kernel accumulates dQ itself
# The task order's rows of tiles for causal kernels (tkpy.templates.schedule.grouped_order's group), whose tasks'
# steps shrink (main kernel: key tiles) or grow (dQ pass: query tiles) with the row: a persistent block takes every
# 132nd task, which with rows of 8 gave each block every fourth row (B16 H16 N4096 D128: the busiest block 11% over
# the average, 37% at N1024); 7, prime to 132, deals every block every row (3% over at both, as causal_pairs_order,
# whose index math spilled the D128 kernel's registers). Counted from the task order (test_attention_bwd), not yet
# timed on the GPU: the causal rows of RESULTS.md run 267 ran with 8.
CAUSAL_TASK_GROUP = 7
TASK_GROUP = 8                      # non-causal (every task the same steps): the template's default


def task_group(causal: bool) -> int:
    """The backward kernels' task-order group (tk.lcf's group) for causal or not."""
    return CAUSAL_TASK_GROUP if causal else TASK_GROUP


# The main kernel's persistent blocks take every other full round of tasks in reverse (AttentionBwdConfig.snake,
# tk.templates.Grouped's snake): causal tasks' steps shrink along the order, so a block's long task in one round then
# meets a short one in the next. Counted from the task order (test_attention_bwd: the busiest block 1.07x the
# average at GQA B8 H32/8 N4096 with CAUSAL_TASK_GROUP, 1.03x with the snake; B16 H16 N4096 1.03x, 1.006x). Non-causal
# tasks take the same steps each: nothing to balance. (non-causal, causal)
SNAKE = Row((False, True), "RESULTS.md runs 345, 352 (bench_attention_bwd.py --compare snake=1 --only causal, twice): "
                           "GQA B8 H32/8 N4096 D128 1.072x/1.030x; B16 H16 N4096 D128 0.990x/1.032x, D64 "
                           "0.997x/1.015x, D256 0.980x/1.019x; N16384 1.008x/0.990x; N1024 0.976x/1.036x; with "
                           "group=1 too 0.78-0.92x but GQA's 1.049x (run 346)")


def snake_for(causal) -> bool:
    """snake's default (SNAKE) for causal kernels or not."""
    return SNAKE.value[bool(causal)]


# The main kernel's setmaxnreg split (producer, each consumer warpgroup), FlashAttention-3's: with the default
# (40, 232) D256's kernel spilled 16 bytes and serialized its wgmmas (C7512).
REGISTERS = (24, 240)


UNTIMED = "fits registers and shared memory (NVRTC resources, tests/test_attention_bwd.py); not yet timed"
# The dQ pass's snake (its causal tasks' steps grow along the order, as the main kernel's shrink): off, untimed
# (bench_attention_bwd.py --compare dq_snake=1 --dims 256 --only causal, and with --deterministic).
DQ_SNAKE = Row((False,), UNTIMED)
# Main kernel: stages of its ring of (Q, dO) query tiles. D128: 2 x 32 KB beside K and V (64 KB), the dS^T tiles
# (32 KB) and the dQ staging tiles (32 KB), all a block can have; D256: one stage of 64 KB beside K and V (128 KB).
MAIN_STAGES = {64: Row((4,), "B16 H16 N4096: 4 stages 5% ahead of 2 non-causal, level causal (RESULTS.md run 266)"),
               128: Row((2,), "the most that fit"), 256: Row((1,), "the most that fit")}
# Main kernel: query rows a step (AttentionBwdConfig.q_rows). 128 (FlashAttention-3's 128 x 128 steps at D64) halves
# the steps a task and so their fixed costs (the waits, the barrier, the stage hand-offs), the tensor work a step
# doubled; D64 only (S^T and dP^T take 64 registers a thread each, beside dK's and dV's 32).
STEP_ROWS = {64: Row((128,), "RESULTS.md runs 332-333 (bench_attention_bwd.py --compare q_rows=128, B16 H16 N4096): "
                             "1.034x and 1.041x 64 rows non-causal, 1.021x and 1.025x causal (in pairs)"),
             128: Row((64,), "128 would not fit: S^T and dP^T of 128 queries (128 registers) beside dK and dV (128)"),
             256: Row((64,), "128 would not fit (as D128)")}
WIDE_STEP_DIMS = (64,)              # the head-dim families that may take 128
# D64's ring at 128 query rows: 32 KB a stage beside K and V (32 KB), dS^T (64 KB) and the storer's stage (32 KB)
MAIN_STAGES_128_ROWS = Row((2,), "the most that fit")


def main_stages_for(family: int, step_rows: int) -> int:
    """The main kernel's default ring stages at head-dim family `family`, `step_rows` query rows a step."""
    return (MAIN_STAGES_128_ROWS if step_rows == 128 else MAIN_STAGES[family]).value[0]


# The main kernel's dQ storer (AttentionBwdConfig.dq_storer): its stages, 0 for none (FlashAttention-3 hands dQ's
# reduce-adds to a warp of its producer warpgroup so). D128 has room for two stages of 32 KB beside K, V, the (Q, dO)
# ring and dS^T (with the semaphores planned after the tiles: 1 KB to spare); D64 for the template's 4
# (DQ_STORER_FITS).
DQ_STORER = {
    64: Row((1,), "RESULTS.md runs 324-325 (bench_attention_bwd.py --compare dq_storer=1): 1.08x the first "
                  "warpgroup's own reduce-adds at B16 H16 N4096 non-causal, 1.12x causal; two stages level with "
                  "one at 64 query rows (runs 332-333: 1.025x, then 0.976x non-causal, 0.981x causal); at 128 "
                  "rows one is all that fits"),
    128: Row((0,), "runs 324-325, one stage: level (0.98-1.03x the first warpgroup's own reduce-adds at "
                   "N1024-16384, 0.96-0.98x GQA H32/8); two stages (runs 332-333): 1.03x non-causal at N4096, "
                   "0.96x causal, level at N1024, N16384 and GQA"),
    256: Row((0,), "the dQ pass computes dQ"),
}
DQ_STORER_FITS = {64: 4, 128: 2, 256: 0}
DQ_STORER_FITS_128_ROWS = 1                 # D64 at 128 query rows: one stage of 32 KB (each warpgroup's 64 rows)


def dq_storer_fits(family: int, step_rows: int) -> int:
    """The most dQ storer stages shared memory holds beside the main kernel's tiles."""
    return DQ_STORER_FITS_128_ROWS if step_rows == 128 else DQ_STORER_FITS[family]


def dq_storer_for(family: int, dq_pass: bool) -> int:
    """The dQ storer's default stages: DQ_STORER's, none where the dQ pass computes dQ."""
    return 0 if dq_pass else DQ_STORER[family].value[0]


# The main kernel's order at 64 query rows a step (AttentionBwdConfig.early_p): P^T computed and dV's products issued
# while dP^T's run (FlashAttention-3's wait for S alone), or (False) both waited for first.
EARLY_P_RUN = ("RESULTS.md runs 335-336 (bench_attention_bwd.py --compare early_p=1, in pairs): causal {} at B16 H16 "
               "N4096, N16384, N1024 and GQA H32/8; non-causal {}")
# (non-causal, causal)
EARLY_P = {64: Row((False, False), "D64 steps over 128 query rows (STEP_ROWS), which early_p does not take"),
           128: Row((False, True), EARLY_P_RUN.format("1.043/1.011/1.045/1.013x", "0.992/0.972/0.993/0.996x")),
           256: Row((False, False), "runs 335-336 (as D128's): B8 H16 N4096 D256 1.015x non-causal, 1.000x causal, "
                                    "its gradients bit-identical: level")}


def early_p_for(family: int, step_rows: int, causal: bool) -> bool:
    """early_p's default: EARLY_P's, for the main kernel at 64 query rows a step only."""
    return EARLY_P[family].value[causal] and step_rows == 64


# dQ pass: (key/value rows per tile, stages). S and dP are 16 x kv per warp next to dQ's 16 x d: D128 takes 64-row
# key tiles; D256's query and dO tiles (128 KB) leave room for one stage of 64 rows or two of 32.
DQ_TILES = {64: Row((128, 2), UNTIMED), 128: Row((64, 2), UNTIMED),
            256: Row((32, 2), "RESULTS.md run 347 (bench_attention_bwd.py --compare dq_kv=32,dq_stages=2 --dims 256, "
                              "B8 H16 N4096): 1.052x non-causal, 1.039x causal against one stage of 64 rows, its "
                              "gradients bit-identical")}


def native_dim(d: int) -> int:
    """The head dim the kernels run for head dim `d` (a multiple of 16): d itself for multiples of 32, else
    d + 16 (zero columns)."""
    return d if d % 32 == 0 else d + 16


def tuned(d: int) -> int:
    """The tuned head dim whose table rows head dim `d` takes: the next one up."""
    return next(t for t in TUNED_DIMS if t >= d)


def atomic_dq(d: int, deterministic: bool) -> bool:
    """Whether the main kernel accumulates dQ (TMA reduce-adds, in no fixed order), or the dQ pass computes it."""
    return d <= ATOMIC_DQ_DIMS and not deterministic


def splits_for(d: int) -> int:
    """The main kernel's tasks per key tile: 1 (dK and dV in full), or past ATOMIC_DQ_DIMS 2 (a column piece
    each)."""
    return 1 if d <= ATOMIC_DQ_DIMS else 2


def lse_rows(n: int) -> int:
    """Rows of the lse / D vectors and of the dQ workspace: n rounded up to LSE_ROWS (their loads need no bounds)."""
    return cdiv(n, LSE_ROWS) * LSE_ROWS
