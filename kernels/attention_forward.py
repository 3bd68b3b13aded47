"""FlashAttention-style forward attention on Hopper with tkpy's LCF template.

A task is 128 query rows of one (batch, head): two consumer warpgroups own 64 rows each, receive their query tile
in shared memory (at D128 each warp then keeps its 16 rows in registers, Q_REGISTERS), and stream key/value tiles
that a producer warpgroup loads with TMA through a ring of stages. Per tile a consumer computes S = Q K^T with
wgmma, an online softmax in the log2 domain on its registers, and O += P V with P straight from registers. The
softmax takes a row max on a task's first tile only: later tiles compute P on the running shift as S arrives and
leave O's scale, and a warpgroup redoes (with the max) the rare step where a row's P sums past 2^RESCALE_SLACK,
which it decides by a vote (stale_shift, STALE_SHIFT).
Grouped-query attention maps query head h to key/value head h // (H / H_kv). The two consumer warpgroups take turns
at the tensor cores (ping-pong, as FlashAttention-3): a warpgroup issues S = Q K^T only once the other's S is done,
so one's softmax runs while the other's matrix products do; and within a warpgroup, step k issues S_k and then step
k-1's O += P V, and runs its softmax while the latter runs (intra-warpgroup overlap). The turns go round across
tasks: a task of no steps takes none, and the first turn is handed over once, before the first task. PINGPONG /
OVERLAP / CONFIGS pick the defaults; benchmarks/bench_attention.py times the variants. `consumer_warpgroups=3` runs
3 consumer warpgroups on 192 query rows per task (FlashAttention-3's choice at D64, where the softmax outweighs the
short MMAs), the turns going round the ring of 3. `split_kv=True` puts K in the template's input ring and V in its
late ring (late_inputs), as FlashAttention-3's separate K and V pipelines: K_k is released once step k is done and
V_{k-1} once step k is, so each K stage is held for one step instead of two. attention() runs D64 with both
(CONFIGS_SPLIT_3WG) unless a 128-row task layout takes fewer waves of the SMs for the sequence at hand
(consumer_warpgroups_for); D128 causal from 1024 to 16383 query rows with 3 on one ring of 64-row tiles
(CAUSAL_GROUP_ROWS), otherwise with 2 warpgroups and one ring, but non-causal from 2048 keys on with split rings of
176-row tiles (split_kv_for), or of 128-row tiles with a V stage more where few query tiles read each key/value
head's tiles (streaming: K and V come from memory); past D128, 2 warpgroups on split rings of the tallest tiles that
fit (wide_kv).

Any lengths: TMA zero-fills key/value rows past N_k and the scores of those keys are set to -inf on
the last key tile, whose step runs on the keys it holds rounded up to 16 (last_kv: S, the softmax and P V
narrower); query rows past N_q read zeros and their outputs are not stored. Causal
attention visits, per query tile, only the key tiles up to its diagonal (the template's per-task
step counts) and masks the diagonal tiles; a warpgroup's last step runs on the keys its rows see where they end
halfway into a tile (last_kv), and its steps past its own diagonal, which its task's later warpgroups need, it
skips (skip_masked; so does, with 3 warpgroups, one whose rows are all padding past N_q). Each persistent block
takes a long query tile and the short one that complements it in the next round (causal_task), so that the blocks
keep in step on a few heads at a time.
A causal kernel puts the padding of a partial query tile before row 0 (pad_first), where rows see the fewest keys.
At D128 each task's start loads the next task's Q into the query tile, which its rows in registers leave free
(q_preload), so that only a block's first task waits for its Q. Where a head's query tiles pair up, the kernels
(causal ones from 8 query tiles a head, 32 at D128) run in clusters of two blocks on adjacent query tiles
(cluster_for): one block multicasts each K tile and the other each V tile into both, so the L2 serves
them once per pair; the non-causal pairs of 3-warpgroup tasks deal a band's 64-row units round its tiles, so that a
partial last band shares its padding (unit), and from 13 query tiles a head pair up an odd number of them with a
tile of padding (causal pairs from CAUSAL_PAIR_TILES, the padding tile before row 0).

Head dims: 64, 128 and 256 were tuned on the H200; any other multiple of 16 up to 256 takes the settings of the next
tuned one up (tuned: D96 runs D128's kernels on narrower tiles), whose registers and shared memory its tiles need at
most.

Decoding and other few-row shapes: GQA runs each key/value head's query heads as one sequence (packed_heads;
causal kernels mask each row by its position in its own head, packed=True), a head's rows that fit 64 run on one
consumer warpgroup (tasks of 64 rows, no turns), and where the tasks fill at most half the SMs their keys are
shared among several tasks (split-K, flash-decoding: splits_for), whose fp32 partial results combine_kernel merges.
"""
from __future__ import annotations

import contextlib
import functools
import math
import warnings

import torch

import tkpy as tk
from tkpy import bf16, call, f32, fp16
from tkpy.runtime import SpillWarning
from tkpy.templates import multiprocessors, shared

from .op_support import check_device
from .tensor_layout import ALIGN, cdiv, tma_layout, tma_ready

Q_ROWS = 128                        # query rows per task of the default kernels (64 per consumer warpgroup)
CONSUMER_WARPGROUPS = 2             # the default; 3 takes 192 query rows per task (see CONFIGS_3WG)
LOG2E = 1.4426950408889634
FLT_MAX = 3.4028234663852886e38
HEAD_GROUP = 8                      # heads per section of the task order at most (K/V of a section share L2)
SECTION_BYTES = 16 << 20            # ... and as many as keep the section's K and V within this many bytes
DTYPES = {torch.bfloat16: bf16, torch.float16: fp16}
# The head dims whose settings below were tuned on the H200; a kernel of another head dim (a multiple of 16 up to
# 256: D80, D96, D160, ...) takes those of the next tuned one up (tuned), whose tiles need at least its registers
# and shared memory.
TUNED_DIMS = (64, 128, 256)
HEAD_DIMS = range(16, 257, 16)      # the head dims the kernels take (wgmma K and the 16-column register tiles)
# head dim -> (key/value rows per stage, stages): K and V tiles of every stage, and the 128 x D query
# tile, fit in shared memory (D=128: 32 KB + 3 x 64 KB); S (16 x kv rows), P and O (16 x D) of each warp
# fit in its registers. A consumer releases a stage one step after it arrived, so 3+ stages keep the
# next step's tiles in flight while the current ones are in use. D=64 takes 160-row tiles: its MMAs are
# short next to the softmax, and fewer, longer steps measured 5-9% faster than 128 (runs 22 and 26).
CONFIGS = {64: (160, 4), 128: (128, 3), 256: (64, 2)}
# With 3 consumer warpgroups (192 query rows per task, as FlashAttention-3 at D64) a consumer has fewer registers:
# (producer, consumer) registers per thread of the setmaxnreg split (FlashAttention-3's: 128 x (32 + 3 x 160) is
# the whole register file), and per head dim the (key/value rows per stage, stages) whose S, P and O fit in them
# without spills (kernel.resources; see tests/test_attention_cpu.py). Q takes 3 x 64 x D of shared memory.
REGISTERS_3WG = (32, 160)
# With one ring, NVRTC 13.0's ptxas serializes the wgmma of D64 past 96-row tiles and of D128 past 64 (warning
# C7512, for want of registers; 13.5's does not): the tiles stay at those heights.
CONFIGS_3WG = {64: (96, 4), 128: (64, 4)}
# With one consumer warpgroup (decoding: K and V streamed past a few query rows), per head dim where CONFIGS does not
# serve: D256's 2 stages of 64 rows leave no load in flight while a step holds K_k and V_{k-1}; 5 stages of 32 rows
# ran 17% faster on one-row decoding (RESULTS.md run 136). D128 measured level with 64-row tiles in 5-6 stages.
CONFIGS_1WG = {256: (32, 5)}
# Non-default split_kv=True: K in the template's ring of input stages and V in its ring of late stages (late_inputs),
# as FlashAttention-3's separate K and V pipelines: step k reads K_k, released once its step is done, and V_{k-1},
# released a step later; so a K stage is held for one step, not two. Per head dim (key/value rows per stage, K
# stages, V stages): D128 takes FlashAttention-3's 176-row tiles in 2 + 2 stages (176 KB beside the 32 KB of Q),
# which still load a step ahead (a combined ring fits only 2 stages of 176 rows: no step ahead). Head dims past 128
# take 2 + 2 stages of the tallest tiles that fit beside Q (wide_kv).
CONFIGS_SPLIT = {64: (192, 4, 4), 128: (176, 2, 2)}
CONFIGS_SPLIT_3WG = {64: (128, 4, 4), 128: (80, 4, 4)}
# ... but where each key/value head's tiles are read by at most STREAM_READERS query tiles (its query heads' tiles of
# one batch, `streaming`), K and V stream from memory rather than from the L2, and the 2-warpgroup split rings take
# CONFIGS_STREAM's shorter tiles with a V stage more (V_k loads two steps ahead): RESULTS.md run 203, D128 128-row
# tiles in 2 + 3 stages against 176 in 2 + 2: +3.8% at B4 H32 N128 over 8192 keys (1 reader), +5.6% at B8 H32 N128
# over 4096, +4.4-7% split-K (B2 and B1 H32 N128 over 16384 keys), +1.5% GQA H32/8 N128 (4 readers), +4% B1 H16 N512
# over 32768 (4 readers, 2 splits); level at 2 readers, 1-3% slower from 8 (run 204) and 3% at 128 (N16384, run 125).
STREAM_READERS = 4
CONFIGS_STREAM = {128: (128, 2, 3)}
# Speed of a full machine of tasks per query row, relative to 2 consumer warpgroups with one ring, of the
# kernels attention() picks between (benchmarks/bench_attention.py --compare): at D64, 3 warpgroups with split K/V
# rings (and, since session 8, cluster pairs) ran 1.02-1.09x in RESULTS.md run 43, and 1.24x-1.49x in run 122
# (the wave counts taken out of the measured 1.10-1.32x at B2 N4096, B8/B16 N1024 and B16 N512; 1.25 keeps the
# model's choice right in each, but for B2 N4096 causal, 4% slower with 3); at D128 they ran 0.87-1.07x, no better
# than the default on the whole, and are not picked.
GROUP_RATE = {64: {2: 1.0, 3: 1.25}, 128: {2: 1.0}, 256: {2: 1.0}}
# ... and causal, for query lengths in CAUSAL_GROUP_ROWS: D128 with 3 warpgroups on one ring of CONFIGS_3WG's 64-row
# key tiles (CAUSAL_ONE_RING_3WG) ran 3-5% faster than 2 (in cluster pairs from 32 query tiles) at N1024-N4096, 0.8%
# at N2048, 2% at N8192, level at N16384 and 9% slower at N512 (RESULTS.md runs 245-246; split rings 3-6% behind one).
CAUSAL_GROUP_RATE = {128: {2: 1.0, 3: 1.04}}
CAUSAL_GROUP_ROWS = {128: range(1024, 16384)}
CAUSAL_ONE_RING_3WG = (128,)
# Head dims whose 2-warpgroup kernels keep each warp's query rows in registers for S = Q K^T (q_registers) when their
# key tiles have 128 rows or fewer: at D128 0-3% faster in 17 of 18 paired measurements (RESULTS.md runs 89, 93, 95);
# D64's default has 3 warpgroups, and S and P of longer tiles leave no room (the split rings' 176 rows spill). The
# serial schedule (overlap=False) keeps Q in shared memory: NVRTC 13.0 miscompiles it with Q in registers (run 96).
Q_REGISTERS = (128,)
# Head dim -> keys up to which attention()'s kernels (2 or 3 consumer warpgroups, Q in shared memory) load each
# consumer's next query tile while it works on its current one (q_ahead): a task of 2-4 key tiles otherwise spends
# a large part of its time waiting for its own Q at its start. RESULTS.md run 220 (3 warpgroups, D64, B = 32768 / N,
# H16): N128 +20% non-causal, +33% causal; N256 +9% and +10%, N384 +4% and +12%, N512 +2% and +4-5%; level at
# N1000-N4096, 1-2% behind from N8192. (D128's kernels keep Q in registers and preload the next one: q_preload.)
Q_AHEAD_KEYS = {64: 512}
# ... and head dim -> key/value rows per tile of the 2-warpgroup kernels there, which split 128 and 256 keys evenly:
# RESULTS.md run 221, D64 128-row tiles 3-15% faster than CONFIGS' 160 at N128 and N256. Their warpgroups run in
# lockstep (pingpong=False): a task of 1-2 steps has no next step for a turn to overlap; 1-4% faster (runs 225, 227).
Q_AHEAD_KV = {64: 128}
# (head dim, consumer warpgroups, causal) whose kernels attention() runs in clusters of two blocks on adjacent query
# tiles of a head (cluster=2; K and V multicast, one by each block) when a head's query tiles pair up: RESULTS.md
# runs 113-114, D64 with 3 warpgroups +3% causal or not, D128 non-causal +1-3.5%; D128 causal from
# CAUSAL_PAIR_TILES (below); past D128 (wide_kv's split rings) +2.5-6% causal or not at D160, D192 and D256 N4096
# (run 198); the cases not timed stay unclustered.
CLUSTER_PAIRS = {(64, 3, False), (64, 3, True), (128, 2, False), (128, 2, True), (256, 2, False), (256, 2, True)}
# ... causal ones only from this many query tiles a head (per head dim): a causal pair loads the key tiles of its
# longer tile, which its other block skips, about 1 / (tiles + 1) of the head's steps. At D64 the pairs ran 3% slower
# than single blocks at 6 tiles (N1024: 0.977 against 1.007 x cuDNN, RESULTS.md run 172), 1% faster at 8, 3% at 10,
# 2% at 12 (run 176) and 3% at 22 (N4096, runs 113-114). D128 (2 warpgroups, Q in registers) was level at N4096 and
# N16384 and 3% slower at N1024 in runs 113-114; on session 20's kernels (runs 240-241) 2-4% slower up to 24 tiles
# (N1024-N3000), +0.5-1.5% at 32 (N4096), +0.6% at 64, +1-3% at 128 and +2.6% at 256. An odd number pairs up with
# a tile of padding before row 0 (next to the tile that sees the fewest keys): D64 +1.6-1.7% at 11 and 43 tiles
# (run 178).
CAUSAL_PAIR_TILES = {64: 8, 128: 32, 256: 8}
# ... and non-causal 3-warpgroup ones (whose units interleave, see the kernel's `unit`) also on an odd number of query
# tiles a head from this many, the pair then taking a last tile of padding: at D64 +3.9% at 43 tiles (N8192), -0.8%
# at 11 (N2048), -12% at 3 (N512), RESULTS.md run 177.
ODD_PAIR_TILES = 13
# Head dim -> keys from which attention() runs the 2-warpgroup kernel with split K/V rings (CONFIGS_SPLIT), non-causal:
# in cluster pairs, D128's 176-row split tiles ran 3.5-5% faster than the 128-row default at 8192 and 16384 keys
# (RESULTS.md runs 125-126); with the partial last tile's step on the keys it holds (last_kv), 0.6-3.1% faster from
# 2048 to 6144 keys in runs 155 and 157 (N4096: +0.7, +1.3, +2.2%), 1-5% slower at 1024 (runs 153-155; the default
# keeps Q in registers and preloads it, which pays at short sequences).
SPLIT_KEYS = {128: 2048}
# Past D128 the 2-warpgroup kernels run split K/V rings whatever the keys, in 2 + 2 stages of the tallest key tiles
# (a multiple of 16, up to 128) that fit in WIDE_SHARED_BYTES beside the 128 x D query tile (wide_kv: D160 128 rows,
# D192 112, D256 80): one ring of two 64-row stages, the previous default, leaves no load in flight while a step
# holds K_k and V_{k-1}, and ran 0.57-0.72x cuDNN at N4096; these 0.89-1.02x (RESULTS.md run 195).
WIDE_SHARED_BYTES = 225 * 1024      # the 227 KB a block can have, less the semaphores and the alignment
# The partial last key tile of a sequence (nk not a multiple of the tile's rows) runs its MMAs and softmax on the
# rows it holds, rounded up to 16 (the last_kv option, last_kv_for), instead of a whole tile of masked keys:
# RESULTS.md run 155, +4% at D128 N1056, +3% at N4000, +1.8% at N8192 (176-row split tiles, 96 rows left).
NARROW_LAST = True
# Split-K (flash-decoding): few (query tile, head) tasks over many keys share each task's keys among `splits`
# tasks and merge their results (combine_kernel), by splits_for's rule: RESULTS.md run 128, 1.5-2.4x faster than
# one task per query tile and 1.46-2.11x cuDNN where the tasks fill at most half the SMs (B1 H32 N128 over 16384
# keys, B1 H16 N512 over 32768, ...); run 129: D256 5.3x unsplit, GQA and bottom-right causal alike. With 1 or 2
# consumer warpgroups (3 split well too, run 129, but 2 are faster on those shapes and attention() picks them).
FAST_DIVISION_TASKS = 2             # tasks a block runs at least for divisors made at its start to pay (runs 231-235)
SPLIT_K_DEFAULT = True
SPLIT_K_DIMS = (64, 128, 256)       # the head dims timed split
SPLIT_MIN_STEPS = 4                 # key tiles per split at least
MAX_SPLITS = 16
PINGPONG = True                     # consumer warpgroups take turns issuing S = Q K^T (named barriers)
RESCALE_SLACK = 8.0                 # stale_shift: log2 of how far a kept step's P may exceed 1
# Head dims whose steps after a task's first compute P on the running shift, without this tile's row max, and leave
# O's scale (stale_shift): the exponentials start as S arrives and ~140 instructions a step go (the max's FMNMX and
# shuffles, the rescale's FMULs). A step whose P would pass 2^RESCALE_SLACK in a row's sum is redone with the max.
# Timed against the max first in RESULTS.md run 181 (a timing-only copy: +7% at D128 N1024 and N4096, +9% at N16384,
# +8-11% at D64) and run 182.
STALE_SHIFT = (64, 128)
# ... and head dims whose 2-warpgroup kernels take it where they compile without spills (_compiles_clean): past D128
# the kernels are at the edge of their registers, and whether they spill with it depends on the assembler (under
# NVRTC 13.5 D160-D192 a little, D256 more; under 13.0, the H200's, only D256 causal). Without spills it ran D160 and
# D192 8-10% faster, D256 non-causal 9% (RESULTS.md runs 195 and 198; attention()'s choice in run 200).
STALE_WHERE_IT_FITS = (256,)
OVERLAP = True                      # step k issues S_k and step k-1's O += P V together (FlashAttention-3)
# (A warp issuing a wgmma waits until the tensor core takes it, so most of that P V has run by the time S_k's
# softmax starts: the timeline, benchmarks/attention_timeline.py, RESULTS.md runs 74-76. The overlap that pays is
# between the warpgroups; this order still measured faster than the serial one, runs 42 and 57.)
# Variants that measured slower and left the kernel (RESULTS.md keeps them): turns round the softmax's exponentials
# instead of the MMA issue ("softmax turns", runs 55, 225, 243), the previous step's P V issued before S ("pv first",
# runs 112, 115, 187), clusters of four (run 118), two one-warpgroup blocks an SM (run 139), and a share of P's
# exponentials by tk.exp2's software emulation ("emu n/8", runs 71, 186, 243).
# Head dims whose one-warpgroup kernels (decoding) run the serial schedule with one ring: a step holds one stage, not
# two; at D128 1.2-6.1% faster in 5 interleaved rounds on five decoding shapes (RESULTS.md run 141).
SERIAL_ONE_GROUP = (128,)
TURN = (2, 3, 7)                    # the named barriers on which warpgroup 0 / 1 / 2 waits for its turn
OWN = (4, 5, 6)                     # the named barriers of warpgroup 0 / 1 / 2 alone (the template uses 0 and 15;
                                    # consecutive: the stale-shift vote names warpgroup w's as OWN[0] + w at run time)
CAUSAL = {False: None, True: "top_left", "top_left": "top_left", "upper_left": "top_left",
          "bottom_right": "bottom_right", "lower_right": "bottom_right"}


def causal_variant(causal) -> str | None:
    """CAUSAL's mask for attention()'s `causal` argument (None: not causal), or a clear error."""
    if not isinstance(causal, (bool, str)) or causal not in CAUSAL:
        raise ValueError(f"causal must be False, True (top-left, as torch), 'top_left' or 'bottom_right'; "
                         f"got {causal!r}")
    return CAUSAL[causal]


def tuned(d: int) -> int:
    """The head dim of TUNED_DIMS whose settings a kernel of head dim d takes: the smallest at least d."""
    return min(t for t in TUNED_DIMS if t >= d)


def wide_kv(d: int) -> int:
    """Key/value rows per tile of split rings past D128: the tallest multiple of 16, up to 128, whose 2 + 2 stages of
    K and V fit in WIDE_SHARED_BYTES beside the 128 x d query tile (bf16/fp16)."""
    return min(128, (WIDE_SHARED_BYTES // (2 * d) - Q_ROWS) // 4 // 16 * 16)


def q_rows(consumer_warpgroups: int = CONSUMER_WARPGROUPS) -> int:
    """Query rows per task: 64 per consumer warpgroup."""
    return 64 * consumer_warpgroups


def lse_rows(n: int, consumer_warpgroups: int = CONSUMER_WARPGROUPS) -> int:
    """Rows of the log-sum-exp buffer the kernel writes for n query rows: n rounded up to a task's rows."""
    return cdiv(n, q_rows(consumer_warpgroups)) * q_rows(consumer_warpgroups)


def consumer_warpgroups_for(b: int, h: int, n: int, d: int, sms: int, causal: bool = False) -> int:
    """The consumer warpgroups (1, 2 or 3) attention() runs for b x h heads of n query rows at head dim d on
    `sms` SMs: 1 where a head's rows fit one 64-row task (n <= 64: decoding, packed GQA heads; a 128-row task
    would be half padding; RESULTS.md runs 131 and 133, 4-16% faster); otherwise the fewest modelled time, waves
    of tasks over the SMs times a task's rows over its rate (ties to 2): a task's rows are its warpgroups' that
    hold real rows, on average (a warpgroup of padding rows skips its steps, skip_masked), and its rate is
    GROUP_RATE's for the warpgroups those rows keep busy (a third warpgroup with nothing to do overlaps no one's
    softmax). E.g. on 132 SMs at D64, B16 H16: N4096 -> 3 (43 waves of 186 rows beat 63 of 128), N1024 -> 3 (12
    waves of 171 rows at 1.25x beat 16 of 128); B128 H16 N256 -> 2 (a head's 4 warpgroups of rows in 2 tasks either
    way, 2 busy on average: RESULTS.md run 221, with q_ahead and 128-row key tiles 8% faster than 3 warpgroups
    non-causal, 6% causal; N128 12% and 10%). causal (not packed): CAUSAL_GROUP_RATE's rates where n is in
    CAUSAL_GROUP_ROWS (D128 B16 H16 N1024 -> 3: 12 waves of 171 rows at 1.04x beat 16 of 128)."""
    if n <= q_rows(1):
        return 1
    rates = GROUP_RATE[tuned(d)]
    if causal and n in CAUSAL_GROUP_ROWS.get(tuned(d), ()):
        rates = CAUSAL_GROUP_RATE[tuned(d)]

    def time(groups):
        tiles = cdiv(n, q_rows(groups))                 # a head's tasks, and their warpgroups of real rows
        busy = cdiv(n, q_rows(1)) / tiles               # (a task's rate: that of the warpgroups it keeps busy)
        return cdiv(b * h * tiles, sms) * q_rows(1) * busy / rates[min(groups, math.ceil(busy))]
    return min(rates, key=lambda groups: (time(groups), groups))


def split_kv_for(nk: int, d: int, consumer_warpgroups: int, causal: bool) -> bool:
    """Whether attention() runs split K/V rings (split_kv) for nk keys: with 3 consumer warpgroups but causal at
    CAUSAL_ONE_RING_3WG's head dims, with 2 past D128 (wide_kv's tiles) and at D128 non-causal from SPLIT_KEYS keys
    on (CONFIGS_SPLIT's 176-row tiles); never with 1 (level, RESULTS.md run 135, and SERIAL_ONE_GROUP's serial
    schedule takes one ring)."""
    if consumer_warpgroups == 1:
        return False
    d = tuned(d)
    if consumer_warpgroups == 3:
        return not (causal and d in CAUSAL_ONE_RING_3WG)
    return d > 128 or (not causal and d in SPLIT_KEYS and nk >= SPLIT_KEYS[d])


def streaming(q: torch.Tensor, k: torch.Tensor, consumer_warpgroups: int) -> bool:
    """Whether each key/value head's tiles are read by at most STREAM_READERS query tiles (its query heads' tiles in
    one batch; q as the kernel takes it, packed heads stacked), so that K and V stream from memory."""
    return q.shape[1] // k.shape[1] * cdiv(q.shape[2], q_rows(consumer_warpgroups)) <= STREAM_READERS


def stream_tiles(q: torch.Tensor, k: torch.Tensor, consumer_warpgroups: int, split_kv: bool) -> tuple | None:
    """CONFIGS_STREAM's (key/value rows per tile, K stages, V stages), which attention() gives the 2-warpgroup split
    rings where the tasks stream K and V (streaming), or None where it keeps default_tiles'."""
    d = tuned(q.shape[3])
    if split_kv and consumer_warpgroups == 2 and d in CONFIGS_STREAM and streaming(q, k, consumer_warpgroups):
        return CONFIGS_STREAM[d]
    return None


def few_keys_options(nk: int, d: int, consumer_warpgroups: int, split_kv: bool, options: dict) -> dict:
    """The options (_attention's) attention() adds to `options` for tasks of few key tiles: with 2 or 3 consumer
    warpgroups up to Q_AHEAD_KEYS keys, where `options` choose none of q_ahead, q_registers and q_preload, each
    consumer's next query tile loaded ahead (q_ahead); 2 warpgroups on one ring then also on Q_AHEAD_KV's tiles in
    lockstep (pingpong=False), unless kv is given (pingpong: unless given)."""
    if consumer_warpgroups == 1 or nk > Q_AHEAD_KEYS.get(tuned(d), 0) \
            or options.keys() & {"q_ahead", "q_registers", "q_preload"}:
        return {}
    added = {"q_ahead": True}
    if consumer_warpgroups == 2 and not split_kv and "kv" not in options:
        added["kv"] = Q_AHEAD_KV[tuned(d)]
        if "pingpong" not in options:
            added["pingpong"] = False
    return added


def default_tiles(d: int, consumer_warpgroups: int, split_kv: bool) -> tuple:
    """(key/value rows per tile, stages, late stages or None) of a kernel by default: CONFIGS and its kin."""
    groups, family = consumer_warpgroups, tuned(d)
    if split_kv and groups == 2 and family > 128:
        return wide_kv(d), 2, 2
    d = family
    if split_kv:
        return (CONFIGS_SPLIT_3WG if groups == 3 else CONFIGS_SPLIT)[d]
    if groups == 1:
        return (*CONFIGS_1WG.get(d, CONFIGS[d]), None)
    return (*(CONFIGS_3WG if groups == 3 else CONFIGS)[d], None)


def last_kv_for(nk: int, kv: int, diagonal: bool = False) -> int | None:
    """The key rows attention() gives the MMAs of the partial last key tile of nk keys in tiles of kv rows (the
    rows it holds rounded up to 16: the last_kv option), or None where the last tile is whole or NARROW_LAST is off.
    diagonal (causal, not packed): where that leaves more than 64 rows or none, 64, a warpgroup's rows, which is
    what its last step needs where its diagonal ends halfway into a key tile (the first warpgroup of a 128-row task
    on 128-row key tiles)."""
    width = cdiv(nk % kv, 16) * 16
    if diagonal and not 0 < width <= 64:
        width = 64
    return width if NARROW_LAST and 0 < width < kv else None


def skips_default(causal: bool, consumer_warpgroups: int, packed: bool) -> bool:
    """Whether a kernel's warpgroups skip the steps no row of theirs sees by default (skip_masked): with 3 consumer
    warpgroups, and causal with 2; not packed."""
    return not packed and (causal and consumer_warpgroups > 1 or consumer_warpgroups == 3)


def pad_first_default(causal: bool, packed: bool) -> bool:
    """Whether a kernel puts a partial query tile's padding before row 0 by default (pad_first): causal, not packed."""
    return causal and not packed


def whole_clusters(causal: bool, consumer_warpgroups: int, packed: bool, skip_masked: bool | None = None,
                   pad_first: bool | None = None) -> bool:
    """Whether a kernel in clusters takes a head's query tiles rounded up to whole clusters, so that an odd number
    pairs up with a tile of padding (the kernel's `tasks`): causal ones with their padding before row 0 (pad_first),
    non-causal ones whose warpgroups of padding rows skip their steps (skip_masked; their units interleave, see the
    kernel's `unit`). skip_masked and pad_first None: the kernel's defaults."""
    if causal:
        return pad_first_default(causal, packed) if pad_first is None else pad_first
    return skips_default(causal, consumer_warpgroups, packed) if skip_masked is None else skip_masked


def cluster_for(n: int, d: int, consumer_warpgroups: int, causal: bool, odd: bool = True) -> int:
    """The blocks per cluster attention() runs for n query rows: 2 where CLUSTER_PAIRS has the kernel and a head's
    query tiles are even in number (a cluster takes two adjacent ones), causal at least CAUSAL_PAIR_TILES[tuned(d)];
    else 1. With `odd` (a kernel that takes whole clusters, whole_clusters), an odd number pairs up too, with a tile of
    padding: causal from CAUSAL_PAIR_TILES (the padding tile beside the one that sees the fewest keys), non-causal
    with 3 warpgroups from ODD_PAIR_TILES."""
    tiles = cdiv(n, q_rows(consumer_warpgroups))
    if (tuned(d), consumer_warpgroups, causal) not in CLUSTER_PAIRS:
        return 1
    if causal:
        return 2 if tiles >= CAUSAL_PAIR_TILES[tuned(d)] and (tiles % 2 == 0 or odd) else 1
    padded = odd and consumer_warpgroups == 3 and tiles >= ODD_PAIR_TILES
    return 2 if tiles % 2 == 0 or padded else 1


def causal_task(index, row_tiles: int, col_tiles: int, blocks: int):
    """(query tile, batch * head) of causal task `index`, the persistent block `index % blocks` taking
    `index`, `index + blocks`, ... (ints or traced expressions alike). Below, R = row_tiles, G = blocks.

    A causal query tile r of R has about r + 1 key tiles, so tile r and tile R-1-r of one head together
    have about R + 1 whatever r: the tasks go in such pairs, the long one in one round and the short one in
    the next, each block taking both tiles of one pair. So every block does the same work in every two
    rounds and the blocks stay in step, which keeps the tasks in flight within one window of the pairs'
    order (head-major: G blocks work on about 2G / R heads, whose K and V stay in the L2). The round-robin
    snake over sections of heads that this replaced let the blocks drift apart (dozens of heads in flight,
    half the L2 reads missing at N4096; RESULTS.md run 91). With R odd, the middle tiles of heads 2k and 2k+1
    pair up after all the others (and the last one is alone when R * heads is odd); a last, partial pair of
    rounds takes its pairs' long tiles first."""
    rows, heads = row_tiles, col_tiles
    total = rows * heads
    half = rows // 2
    inner = heads * half                                 # pairs within a head (tiles r, rows-1-r), head-major
    pairs = (total + 1) // 2                             # then the middle pairs; the very last may be alone
    first = index // (2 * blocks) * blocks               # the first pair of this pair of rounds
    here = call("min", blocks, pairs - first)            # pairs in it (fewer in the last)
    j = index - 2 * first                                # slot in it: long tiles first, then short ones
    short = j >= here
    pair = first + j - short * here
    middle = pair >= inner
    per_head = call("max", 1, half)
    p = pair % per_head
    row = rows - 1 - p + short * (2 * p + 1 - rows)      # inner pair p: tiles rows-1-p (long), p (short)
    row = row + middle * (half - row)                    # middle pair k: tile rows // 2 of heads 2k and 2k+1
    col = pair // per_head
    col = col + middle * (2 * (pair - inner) + short - col)
    return row, col


def section_task(index, row_tiles: int, col_tiles: int, heads: int):
    """(query tile, batch * head) of non-causal task `index` (ints or traced expressions alike): sections of
    `heads` columns (the last may have fewer), in each the last query tiles first, heads inner. Every division is
    by a value fixed for the kernel (heads, and the last section's, at least 1), which a kernel with fast_division
    makes once (codegen/divisors.py): a task switch's index math is then a few multiply-highs."""
    per_section = heads * row_tiles
    first_col = index // per_section * heads
    within = index % per_section
    last_heads = call("max", 1, col_tiles % heads)       # (the last section's, where it is partial)
    partial = first_col + heads > col_tiles
    row, col = within // heads, within % heads
    row = row + partial * (within // last_heads - row)
    col = col + partial * (within % last_heads - col)
    return row_tiles - 1 - row, first_col + col


def _own_sync(groups: int = CONSUMER_WARPGROUPS) -> None:
    """A barrier among the calling consumer warpgroup's 4 warps (of `groups` consumer warpgroups). A branch per
    warpgroup with its barrier id an immediate, here and in _turn: ids computed at run time (OWN[0] +
    tk.warpgroup.id(), as the vote's) hold a register through the task loop, and D128's kernels at the edge of
    the register file then spill (checked under NVRTC 13.5: split rings causal, last_kv)."""
    for wg in range(groups):
        with tk.if_(tk.warpgroup.id() == wg):
            tk.warpgroup.sync(OWN[wg])


def _first_warp(body) -> None:
    """body(wg) on the first warp of each consumer warpgroup, wg = tk.warpgroup.id()."""
    with tk.if_(tk.warp_id() % 4 == 0):
        body(tk.warpgroup.id())


def _turn(sync_on_turn: bool, groups: int = CONSUMER_WARPGROUPS) -> None:
    """The turns go round a ring of `groups` warpgroups: warpgroup w waits for its turn (sync on TURN[w]), or
    hands the turn to the next, w + 1 mod groups (arrive on its barrier). Each barrier is met by two
    warpgroups, one syncing and one arriving: 8 warps."""
    for wg in range(groups):
        with tk.if_(tk.warpgroup.id() == wg):
            if sync_on_turn:
                tk.named_sync(TURN[wg], 8)
            else:
                tk.named_arrive(TURN[(wg + 1) % groups], 8)


@functools.cache
def _attention(d: int, dtype=bf16, causal: bool = False, pingpong: bool = PINGPONG, stages: int | None = None,
               overlap: bool | None = None, kv: int | None = None, consumer_warpgroups: int = CONSUMER_WARPGROUPS,
               split_kv: bool = False, late_stages: int | None = None, q_ahead: bool = False,
               q_registers: bool | None = None, q_preload: bool | None = None, pad_first: bool | None = None,
               cluster: int = 1, split_k: bool = False, packed: bool = False,
               last_kv: int | None = None, skip_masked: bool | None = None, lse: bool = True,
               stale_shift: bool | None = None, next_q_in_step: bool | None = None, fast_division: bool = True):
    """The LCF attention kernel for head dim `d`, element type `dtype` (bf16/fp16), causal or not, with the
    consumer warpgroups taking turns at issuing their MMAs (pingpong=True) or in lockstep (False), `stages`
    (default: CONFIGS), each step's softmax overlapping
    the previous step's P V product or not (`overlap`; default OVERLAP, but serial for one consumer warpgroup at
    SERIAL_ONE_GROUP's head dims), and `kv` key/value rows per tile (default: CONFIGS; a multiple
    of 16 up to 256, the wgmma N of S = Q K^T; the template raises if its stages do not fit in shared
    memory), and `consumer_warpgroups` 2 or 3 (64 query rows each; with 3, tasks of 192 rows, the turns go
    round the 3, the registers are split REGISTERS_3WG and the defaults are CONFIGS_3WG's; head dims
    there only). The kernel takes `scale_log2` = softmax scale * log2(e), which must be positive (attention()
    makes it so), and, when causal, an `offset` scalar: query i sees key j when j <= i + offset.
    split_kv=True (non-default; with overlap only): K tiles in `stages` input stages and V tiles in `late_stages`
    late stages of their own (the template's late_inputs), defaults CONFIGS_SPLIT / CONFIGS_SPLIT_3WG; the kernel
    name gains "_splitkv". q_ahead=True: two query tiles per consumer warpgroup, the next task's loading into one
    while this task runs on the other (otherwise each task waits for its own at its start); name "_qahead".
    next_q_in_step (default: with q_ahead where every task has a first step: non-causal, no split-K or skips): the
    next task's Q load is issued in a task's first step, behind its S, instead of at its start; False there: name
    "_qloadatstart" (RESULTS.md run 229).
    fast_division=False: the task loops' index math by C++'s division, not by divisors made once (tk.kernel's
    option); name "_cdiv".
    stale_shift (default at STALE_SHIFT's head dims): a step after a
    task's first computes P = exp2(S * scale_log2 - shift) on the running shift as S arrives, without this tile's
    row max, and leaves O's scale, so P may exceed 1; where some row's sum of the step's P passes
    2^RESCALE_SLACK (its max grew by about that much; every P of a step kept is at most that, within the range of
    P's type, and L's shift stays the one P used) the warpgroup votes (tk.warpgroup.any_greater) to redo the
    step: S = Q K^T again, the softmax with the max, O rescaled. Rows that saw only masked keys so far (shift
    -FLT_MAX) get an infinite sum and redo their first real step. False where it is the default: name
    "_maxfirst"; True where it is not: "_stale".
    q_registers=True: each warp's 16 query rows in registers (loaded from the query tile once per task), so
    S = Q K^T reads only K from shared memory; 32 more registers a thread at D128, which the 2-warpgroup kernels
    have (with 3 warpgroups they spill); with overlap only. Default (None): Q_REGISTERS; the name gains "_qregs"
    or "_qshared" where the choice is not the default. q_preload=True (with Q in registers, not with q_ahead): a
    task's start loads the next task's Q into the query tile, free once its own rows are in registers, and its
    finish moves them into the registers before O goes out through the tile; so no task waits for its Q but
    the block's first. Default (None): whenever Q is in registers and not q_ahead; the name gains "_qpreload" or
    "_noqpreload" where the choice is not the default. pad_first (causal only; the default there): when n is not a
    multiple of the task's rows, the padding of the partial query tile goes before row 0 (the first task's first
    warpgroups have no rows) instead of after row n-1, where a causal row sees the most keys: D64's 192-row
    tasks at N4096 run 5.5% fewer steps; False: name "_padlast".
    cluster=2: clusters of two blocks on adjacent query tiles of one head, in lockstep; block 0 loads each K tile
    and block 1 each V tile (with split_kv, into the late ring), multicast to both, so the L2 serves each key/value
    tile once per pair (the query tiles per head must be even). Causal: the pair loads the key tiles of the tile
    that sees more, and the other block skips the extra ones (the template's clusters of unequal tasks; the
    blocks take the pair's upper tile in turns); name "_cluster2".
    split_k=True (no clusters): the kernel takes `splits`, and each (query tile, head) task's key tiles are shared
    by that many tasks (the template's schedule.SplitK), each writing its O normalized over its own keys (fp32,
    straight from the registers) and its log-sum-exp into workspaces O and L of splits x batch rows (split s of
    batch b at s * B + b); combine_kernel merges them (flash-decoding). For few tasks and many keys (see
    splits_for); name "_splitk".
    packed=True (causal only): each sequence of query rows stacks several heads' rows (attention()'s packed_heads), and
    the kernel takes `rows_per_head`: row r is at position r % rows_per_head, which the causal mask and each task's
    key tiles follow (tk.tril_periodic); name "_packed". (Non-causal packing needs no kernel of its own.)
    last_kv (a multiple of 16 below kv): the step on a partial last key tile (one with at most last_kv keys left,
    which is where any task that reaches it ends) runs S = Q K^T, the softmax and P V on the first last_kv rows of
    the tile only (wgmma N and K of last_kv; the code of a step twice, once per width); causal (not packed), so
    does a warpgroup's last step where its rows see none of the tile's keys past the first last_kv (its diagonal
    ends there). Any nk stays right; attention() passes last_kv_for(nk, kv, causal and not packed); name "_last"
    and the rows. skip_masked (default: with 3 consumer warpgroups, and causal with 2; not packed): a warpgroup
    skips a task's steps on key tiles none of its rows sees (all of them where its rows are padding past N; causal,
    those past its diagonal: with 3 warpgroups on 128-row key tiles the first one's ends a tile before the task's),
    only taking its turn there; False: name "_noskip"; True with 2 warpgroups non-causal: "_skip".
    lse=False: the kernel takes no L and computes no log-sum-exp (attention() without return_lse, as SDPA's
    inference kernels); name "_nolse". Split-K needs it (combine_kernel weighs the splits by it)."""
    groups = consumer_warpgroups
    if pingpong not in (True, False):
        raise ValueError(f"attention: pingpong must be True or False, got {pingpong!r}")
    if groups not in (1, 2, 3):
        raise ValueError(f"attention: consumer_warpgroups must be 1, 2 or 3, got {groups!r}")
    pingpong = pingpong if groups > 1 else False         # (one warpgroup takes no turns)
    if d not in HEAD_DIMS:
        raise ValueError(f"attention: the head dim must be a multiple of 16 from 16 to 256, got {d}")
    family = tuned(d)                                       # (the tuned settings it takes)
    if groups == 3 and family not in CONFIGS_3WG:
        raise ValueError(f"attention: 3 consumer warpgroups take head dims up to {max(CONFIGS_3WG)} (their "
                         f"registers hold S, P and O of those only), got {d}")
    if overlap is None:         # OVERLAP, but the serial schedule for SERIAL_ONE_GROUP's one-warpgroup kernels
        overlap = OVERLAP and not (groups == 1 and family in SERIAL_ONE_GROUP and not split_kv)
    if split_kv and not overlap:
        raise ValueError("attention: split_kv=True reads V_{k-1} at step k (the overlapped schedule); it needs "
                         "overlap=True")
    if cluster not in (1, 2):
        raise ValueError(f"attention: cluster must be 1 or 2, got {cluster!r}")
    if split_k and cluster > 1:
        raise ValueError("attention: split_k=True shares a task's keys between tasks that run apart; no clusters")
    if split_k and not lse:
        raise ValueError("attention: split_k=True needs lse=True (combine_kernel weighs the splits by their "
                         "log-sum-exps)")
    if late_stages is not None and not split_kv:
        raise ValueError("attention: late_stages (V's stages) is for split_kv=True")
    stale_default = family in STALE_SHIFT
    stale_shift = stale_default if stale_shift is None else stale_shift
    rows = q_rows(groups)                                   # query rows per task
    skips_by_default = skips_default(causal, groups, packed)
    skips = skips_by_default if skip_masked is None else skip_masked
    if skips and (packed or groups == 1):
        raise ValueError("attention: skip_masked=True is for kernels of 2 or 3 consumer warpgroups, not packed (a "
                         "warpgroup of padding rows, or causal one whose diagonal ends before its task's)")
    interleaved = cluster > 1 and not causal and skips      # (see unit)
    everyone = (1 << cluster) - 1                           # the multicast mask of the cluster's blocks
    default_kv, default_stages, default_late = default_tiles(d, groups, split_kv)
    producer_registers, consumer_registers = REGISTERS_3WG if groups == 3 else (None, None)
    kv = kv or default_kv
    if kv % 16 or not 16 <= kv <= 256:
        raise ValueError(f"attention: kv (key/value rows per tile) must be a multiple of 16 from 16 to 256, got {kv}")
    stages = stages or default_stages
    if last_kv is not None and (not isinstance(last_kv, int) or last_kv % 16 or not 16 <= last_kv < kv):
        raise ValueError(f"attention: last_kv (rows of a partial last key tile's MMAs) must be a multiple of 16 below "
                         f"kv ({kv}), got {last_kv!r}")
    q_default = groups <= 2 and family in Q_REGISTERS and kv <= 128 and overlap   # (longer tiles: spills)
    q_registers = q_default if q_registers is None else q_registers
    if packed and not causal:
        raise ValueError("attention: packed=True is for causal attention (non-causal packed rows need no kernel of "
                         "their own)")
    pad_first = pad_first_default(causal, packed) if pad_first is None else pad_first
    if pad_first and packed:
        raise ValueError("attention: pad_first=True does not go with packed=True (positions of rows before row 0)")
    if pad_first and not causal:
        raise ValueError("attention: pad_first=True is for causal attention (without a mask every row costs the same)")
    whole_bands = cluster > 1 and whole_clusters(causal, groups, packed, skips, pad_first)   # (tasks)
    preload_default = q_registers and not q_ahead
    # q_ahead: where every task has a first step (non-causal, no split-K or skips: otherwise tasks or warpgroups of
    # none), the next task's Q load is issued there, behind the step's S, its coordinates' integer divisions off
    # the way to that S (next_q_in_step).
    in_step_default = q_ahead and overlap and not causal and not split_k and not skips
    next_q_in_step = in_step_default if next_q_in_step is None else next_q_in_step
    if next_q_in_step and not in_step_default:
        raise ValueError("attention: next_q_in_step=True needs q_ahead and the overlapped schedule, and every task a "
                         "first step (non-causal, no split-K or skip_masked)")
    q_preload = preload_default if q_preload is None else q_preload
    if q_preload and (not q_registers or q_ahead):
        raise ValueError("attention: q_preload=True moves the next task's Q into registers at a task's finish; it "
                         "needs q_registers and not q_ahead (a second query tile)")
    if q_registers and not overlap:
        raise ValueError("attention: q_registers=True needs overlap=True: in the serial schedule NVRTC 13.0's ptxas "
                         "gives Q's registers to P inside the step loop (wrong outputs on the H200, RESULTS.md run 96)")
    name = f"attention_fwd_d{d}" + ("" if dtype == bf16 else f"_{dtype.name}") \
        + ("" if groups == 2 else f"_{groups}wg") + ("_causal" if causal else "") \
        + ("" if pingpong or groups == 1 else "_lockstep") \
        + ("" if stages == default_stages else f"_{stages}stages") \
        + ("" if overlap else "_serial") + ("" if kv == default_kv else f"_kv{kv}")
    rings = {}
    if split_kv:
        late_stages = late_stages or default_late
        name += "_splitkv" + ("" if late_stages == default_late else f"_{late_stages}late")
        rings = dict(late_stages=late_stages)
    q_buffers = 2 if q_ahead else 1
    name += ("_qahead" if q_ahead else "") \
        + ("" if q_registers == q_default else "_qregs" if q_registers else "_qshared") \
        + ("" if q_preload == preload_default else "_qpreload" if q_preload else "_noqpreload") \
        + ("_padlast" if causal and not pad_first and not packed else "") \
        + (f"_cluster{cluster}" if cluster > 1 else "") + ("_splitk" if split_k else "") \
        + ("_packed" if packed else "") \
        + (f"_last{last_kv}" if last_kv else "") + ("" if fast_division else "_cdiv") \
        + ("" if skips == skips_by_default else "_skip" if skips else "_noskip") + ("" if lse else "_nolse") \
        + ("" if stale_shift == stale_default else "_stale" if stale_shift else "_maxfirst") \
        + ("_qloadatstart" if in_step_default and not next_q_in_step else "")

    scheduler = dict(scheduler=tk.templates.SplitK(lambda g: g.splits)) if split_k else {}

    @tk.lcf(consumer_warpgroups=groups, stages=stages, persistent=True, name=name, cluster=cluster,
            producer_registers=producer_registers, consumer_registers=consumer_registers,
            fast_division=fast_division, **rings, **scheduler)
    class Attention:
        Q: tk.gl[dtype, "B", "H", "N", d]
        K: tk.gl[dtype, "B", "HKV", "NK", d]
        V: tk.gl[dtype, "B", "HKV", "NK", d]
        if split_k:                         # split s of batch b at s * B + b (combine_kernel merges them)
            O: tk.gl[f32, "SB", "H", "N", d]
            L: tk.gl[f32, "SB", "H", "NL"]
        else:
            O: tk.gl[dtype, "B", "H", "N", d]
            if lse:                         # NL: N rounded up to rows, or more (the stores need no bounds check)
                L: tk.gl[f32, "B", "H", "NL"]
        scale_log2: float                   # softmax scale * log2(e), positive
        if causal:
            offset: int                     # query i sees keys j <= i + offset
        if packed:
            rows_per_head: int              # row r of a sequence is query r % rows_per_head of its head
        if split_k:
            splits: int                     # tasks sharing each query tile's keys
        if split_kv:                        # K_k released after step k, V_k (read at step k + 1) after step k + 1
            inputs = dict(k=shared(dtype, kv, d))
            late_inputs = dict(v=shared(dtype, kv, d))
        else:
            inputs = dict(k=shared(dtype, kv, d), v=shared(dtype, kv, d))

        def tasks(self, g):
            """(query tiles, batch * heads). Clusters whose padding rows cost little take a head's tiles rounded up
            to whole clusters: the interleaved ones (see unit), and causal ones with pad_first, whose extra tile of
            padding goes before row 0 (beside the tile that sees the fewest keys)."""
            return self.row_tiles(g), g.Q.batch * g.Q.depth

        def row_tiles(self, g):
            tiles = cdiv(g.Q.rows, rows)
            return cdiv(tiles, cluster) * cluster if whole_bands else tiles

        def first_unit(self, g, task):
            """The task's first 64 query rows, in 64-row units (warpgroup w takes unit first + w, but see unit).
            With pad_first the units before the first real one (0) are padding: the first task's first warpgroups
            (with clusters, tasks) have no rows."""
            if not pad_first:
                return task.row * groups
            return task.row * groups - (self.row_tiles(g) * groups - cdiv(g.Q.rows, 64))     # (the padding units)

        def unit(self, g, task, wg):
            """Warpgroup wg's 64 query rows of the task, in 64-row units. Non-causal clusters whose warpgroups of
            padding rows skip their steps (3 warpgroups) deal a band of the cluster's tiles' units round its tiles
            (tile r's warpgroup w takes unit band * cluster * groups + cluster * w + r % cluster): the padding of
            a head's partial last band is then shared among the band's tiles, which run in lockstep, instead of
            one tile of mostly padding beside whole ones (at 1024 rows, 16 units: 2 + 2 real warpgroups rather
            than 3 + 1), and an odd number of query tiles a head pairs up with a last tile of padding (tasks; at
            2048 rows, 11 tiles: the last band's 2 real units 1 + 1). Units past the last real one are padding
            (zeros in, nothing stored)."""
            if not interleaved:
                return self.first_unit(g, task) + wg
            return task.row // cluster * (cluster * groups) + cluster * wg + task.row % cluster

        if causal:
            def iters(self, g, task):
                """The key tiles holding a key that some (real) query row of the tile sees."""
                last_row = call("min", self.first_unit(g, task) * 64 + rows - 1, g.Q.rows - 1)
                if packed:      # the last row's position, or the last position if the tile starts another head
                    n, first_row = g.rows_per_head, self.first_unit(g, task) * 64
                    last_row = call("min", n - 1, last_row % n + (last_row // n - first_row // n) * n)
                seen = last_row + g.offset + 1                           # keys 0 .. seen-1
                return call("max", 0, call("min", cdiv(g.K.rows, kv), cdiv(seen, kv)))
        else:
            def iters(self, g):
                return cdiv(g.K.rows, kv)

        def order(self, g, index, row_tiles, col_tiles):
            """Causal: causal_task's pairs (every block in step with the others, on a few heads at a time).
            Otherwise sections of up to HEAD_GROUP heads whose K and V fit in SECTION_BYTES (a third of the
            L2: 8 heads at 4096 keys of D128, 2 at 16384); in each, the last query tiles first, heads inner:
            the blocks running together share the K/V of a few heads."""
            if causal:
                schedulers = tk.grid_dim.x // cluster if cluster > 1 else tk.grid_dim.x     # (clusters)
                return causal_task(index, row_tiles, col_tiles, schedulers)
            return section_task(index, row_tiles, col_tiles, g.section_heads)

        def constants(self, g):
            """Non-causal: the heads of a section of the task order (order)."""
            if causal:
                return {}
            return dict(section_heads=call("max", 1, call("min", HEAD_GROUP,
                                                          SECTION_BYTES // (g.K.rows * (2 * d * dtype.nbytes)))))

        def load(self, g, task, inp, k, arrived):
            k = task.k0 + k if split_k else k                            # (split-K: from the share's first)
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            hkv = h // (g.Q.depth // g.K.depth)
            tk.tma.expect(arrived, inp)                                  # the whole stage, a peer's half included
            if cluster > 1:     # the cluster's query tiles are of one head: block 0 loads K, block 1 V, to all
                with tk.if_(task.rank == 0):
                    tk.tma.load_async(inp.k, g.K, (b, hkv, k, 0), arrived, multicast=everyone)
                if not split_kv:                                         # (split: V in load_late)
                    with tk.else_():
                        tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived, multicast=everyone)
                return
            tk.tma.load_async(inp.k, g.K, (b, hkv, k, 0), arrived)      # rows past NK arrive as zeros
            if not split_kv:
                tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived)

        if split_kv:
            def load_late(self, g, task, inp, k, arrived):
                """V_k, into the ring of late stages (after K_k, once its stage is free)."""
                k = task.k0 + k if split_k else k
                b, h = task.col // g.Q.depth, task.col % g.Q.depth
                hkv = h // (g.Q.depth // g.K.depth)
                tk.tma.expect(arrived, inp)
                if cluster > 1:                                          # block 1 loads V, to all
                    with tk.if_(task.rank == 1):
                        tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived, multicast=everyone)
                else:
                    tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived)

        def setup(self, st):
            # each consumer's 64 query rows, then its output: tile buffer * groups + wg (q_ahead: 2 buffers)
            st.q = tk.st(dtype, 64, d, count=groups * q_buffers)
            st.q_arrived = tk.semaphore(groups * q_buffers)      # each query tile has landed
            st.tasks_done = tk.var(0, "tasks_done")              # this warpgroup's tasks so far: the phase
            for buffer in range(q_buffers):
                _first_warp(lambda wg: tk.init_semaphore(st.q_arrived[buffer * groups + wg], 1))
            _own_sync(groups)
            if q_registers:
                st.q_regs = tk.rt(dtype, 16, d)
            st.probs = tk.rt(dtype, 16, kv)                      # P, kept for the next step's P V
            st.out = tk.rt(f32, 16, d)
            st.row_max = tk.col_vec(st.out)                      # running max of the raw scores
            st.shift = tk.col_vec(st.out)                        # row_max * scale_log2 (causal: at least -FLT_MAX)
            st.factor = tk.col_vec(st.out)                       # the previous shift, then exp2(its change)
            st.row_sum = tk.col_vec(st.out)
            if stale_shift:
                st.step_sum = tk.col_vec(st.out)                 # a step's share of the row sums
            elif overlap:                                        # where each warp stores its row sums, unread:
                st.anchor = tk.sv(f32, 16, count=4 * groups)     # see compute
            if pingpong:        # warpgroup 0 takes the first turn: the last hands it over, as after a turn of its own
                with tk.if_(tk.warpgroup.id() == groups - 1):
                    tk.named_arrive(TURN[0], 8)

        def load_q(self, st, task, buffer):
            """Each consumer warpgroup's 64 query rows of `task` into its query tile of `buffer` (zeros past N; a
            warpgroup of padding rows before row 0 loads rows 0-63, whose results it does not store), by its
            first warp."""
            g = st.g
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            def load(wg):
                tile = buffer * groups + wg
                unit = self.unit(g, task, wg)
                tk.tma.expect(st.q_arrived[tile], st.q[tile])
                tk.tma.load_async(st.q[tile], g.Q, (b, h, call("max", 0, unit) if pad_first else unit, 0),
                                  st.q_arrived[tile])
            _first_warp(load)

        def start(self, st, task):
            g = st.g
            wg = tk.warpgroup.id()
            if q_preload:       # this task's rows came into registers at the last finish, but for the first task
                st.q_tile = wg
                with tk.if_(st.tasks_done == 0):
                    self.load_q(st, task, 0)
                    tk.wait(st.q_arrived[wg], 0)
                    self.q_to_registers(st)
                    tk.fence_proxy_async()                       # the tile read before TMA writes it again
                    _own_sync(groups)
                with tk.if_(st.has_next_task()):                 # the next task's Q lands during this task (the
                    self.load_q(st, st.next_task(), 0)           # tile is free: finish's O store has read it)
            elif not q_ahead:
                self.load_q(st, task, 0)
                st.q_tile = wg
                tk.wait(st.q_arrived[wg], st.tasks_done % 2)
            else:               # this task's Q was loaded during the last (or now, for the block's first task)
                with tk.if_(st.tasks_done == 0):
                    self.load_q(st, task, 0)
                # The next task's into the other buffer: the previous task's O store has read it (finish waits).
                # (One load at a computed buffer: a branch per warpgroup and buffer cost the MMAs their uniform
                # registers, RESULTS.md run 49.)
                if not next_q_in_step:
                    with tk.if_(st.has_next_task()):
                        self.load_q(st, st.next_task(), 1 - st.tasks_done % 2)
                st.q_tile = tk.let(st.tasks_done % 2 * groups + wg, "q_tile")
                tk.wait(st.q_arrived[st.q_tile], st.tasks_done // 2 % 2)
            st.tasks_done += 1
            if q_registers and not q_preload:
                self.q_to_registers(st)
            tk.zero(st.out)
            tk.zero(st.row_sum)
            tk.neg_infty(st.row_max)
            tk.neg_infty(st.shift)
            if causal:   # key k * kv + c is masked for this warp's row r when c > r + diagonal - k * kv
                first_row = self.warpgroup_row(g, task) + tk.warp_id() % 4 * 16
                if packed:                                       # (r's position: (first_row + r) % rows_per_head)
                    st.first_row = tk.let(first_row, "first_row")
                else:
                    st.diagonal = tk.let(first_row + g.offset, "diagonal")
                    if last_kv:     # the keys below this are those some row of this warpgroup sees
                        st.seen = tk.let(self.seen(g, task), "seen")
            if skips:
                st.last_step = tk.let(self.steps_seen(st) - 1, "last_step")

        def warpgroup_row(self, g, task):
            """This warpgroup's first query row of the task (negative for padding before row 0, see first_unit)."""
            return self.unit(g, task, tk.warpgroup.id()) * 64

        def seen(self, g, task):
            """Causal: the keys below this are those some row of this warpgroup sees."""
            return self.warpgroup_row(g, task) + 64 + g.offset

        def steps_seen(self, st):
            """The task's steps on a key tile that some row of this warpgroup sees: none where its rows are all
            padding past N; causal, up to its diagonal (with 3 warpgroups on 128-row key tiles the first one's ends
            a tile before its task's)."""
            g, task = st.g, st.task
            real = call("max", 0, call("min", 1, g.Q.rows - self.warpgroup_row(g, task)))   # 1, or 0 for padding rows
            if not causal:
                return st.iters * real
            first_key_tile = task.k0 if split_k else 0
            return call("min", st.iters, cdiv(call("max", self.seen(g, task), 0), kv) - first_key_tile) * real

        def mask(self, st, k, scores):
            """S's scores of keys its rows do not see set to -inf: causal, past each row's diagonal; on the last
            tile, keys past NK. S's columns: the key tile's rows in use (kv, or last_kv)."""
            g = st.g
            width = scores.type.cols
            k = st.task.k0 + k if split_k else k                 # the key tile
            if causal and packed:                                # a row at position p masks c > p + diagonal
                diagonal = g.offset - k * kv
                with tk.if_(diagonal < width - 1):              # (so the tile masks nothing for p >= 0 past this)
                    tk.tril_periodic(scores, scores, st.first_row, g.rows_per_head, diagonal, -math.inf)
            elif causal:
                diagonal = st.diagonal - k * kv
                with tk.if_(diagonal < width - 1):              # this tile crosses the warp's diagonal
                    tk.tril(scores, scores, diagonal, -math.inf)
            with tk.if_(k * kv + width > g.K.rows):             # the last tile: keys past NK
                tk.right_fill(scores, scores, g.K.rows - k * kv, -math.inf)

        def softmax(self, st, k, scores):
            """S -> P = exp2(S * scale_log2 - shift) in place, masked, shift = running max * scale_log2 (the max
            of the raw scores: the scale is positive); st.factor becomes the factor that rescales what was
            accumulated (exp2 of the shift's change); the row sums are updated. Per score: FMNMX (max), one
            FFMA and MUFU.EX2 (P), FADD (sum)."""
            g = st.g
            self.mask(st, k, scores)
            tk.copy(st.factor, st.shift)
            tk.row_max(st.row_max, scores, st.row_max)           # running max over the tiles so far
            tk.mark("softmax: row max")
            if causal:                                           # a row that saw only masked keys: exp2(-inf) = 0
                tk.map(st.shift, lambda m: tk.max(m * g.scale_log2, -FLT_MAX), st.row_max)
            else:
                tk.mul(st.shift, st.row_max, g.scale_log2)
            tk.map(scores, lambda s, m: tk.exp2(s * g.scale_log2 - m), scores, st.shift)
            tk.mark("softmax: exponentials")
            tk.map(st.factor, lambda prev, m: tk.exp2(prev - m), st.factor, st.shift)   # rescale what was accumulated
            tk.mul(st.row_sum, st.row_sum, st.factor)
            tk.row_sum(st.row_sum, scores, st.row_sum)

        def softmax_on_stale_shift(self, st, k, scores, redo_s):
            """S -> P = exp2(S * scale_log2 - shift) in place, masked, on the running shift (stale_shift: no row
            max, so the exponentials start as S arrives, and O keeps its scale), the row sums updated; but where
            some row's sum of this step's P passes 2^RESCALE_SLACK, the warpgroup (a vote) redoes S (redo_s: S =
            Q K^T again, every MMA of the warpgroup then done) and the softmax with the max, and rescales O.
            Per score: one FFMA and MUFU.EX2 (P), FADD (sum)."""
            g = st.g
            self.mask(st, k, scores)
            tk.map(scores, lambda s, m: tk.exp2(s * g.scale_log2 - m), scores, st.shift)
            tk.mark("softmax: exponentials")
            tk.row_sum(st.step_sum, scores)
            grew = tk.warpgroup.any_greater(st.step_sum, 2.0 ** RESCALE_SLACK, OWN[0] + tk.warpgroup.id(), name="grew")
            with tk.if_(grew):                                  # (rare: a row max grew by ~RESCALE_SLACK)
                redo_s()
                self.softmax(st, k, scores)
                tk.mul_row(st.out, st.out, st.factor)
            with tk.else_():
                tk.add(st.row_sum, st.row_sum, st.step_sum)
            tk.mark("softmax: row sums")

        def tiles(self, st, width):
            """This warp's 16 rows of S for a step on `width` key rows (P's exponentials in place), a tile of the
            step's own (dead between steps), and of the P it becomes: st.probs, kept for the next step's P V, or
            on a narrow step (width last_kv; the step's own P V ends the task) its first columns. (As
            a window of a whole-tile S, NVRTC 13.0's ptxas serialized the wgmmas, C7511; a tile of its own for
            that P left D128 with Q in registers too few registers for them, C7512.)"""
            if width == kv:
                return tk.rt(f32, 16, kv, name="scores"), st.probs
            return tk.rt(f32, 16, width, name="scores_last"), st.probs.subtile(16, width)

        def narrow_step(self, st, k):
            """Whether step k takes last_kv rows: on the partial last key tile (any task that reaches it ends
            there), and causal, on the warpgroup's last step where its rows see none of the keys past those."""
            key_tile = st.task.k0 + k if split_k else k
            left_out = key_tile * kv + last_kv                  # the first key the narrow step leaves out
            if causal and not packed:
                return (k == self.last_step(st)) & ((left_out >= st.g.K.rows) | (st.seen <= left_out))
            return left_out >= st.g.K.rows

        def last_step(self, st):
            """This warpgroup's last step of the task (see start: causal warpgroups may end before the task)."""
            return st.last_step if skips else st.iters - 1

        @staticmethod
        def rows_of(tile, width):
            """A key/value tile's first `width` rows (the whole tile at kv)."""
            return tile if width == kv else tile.subtile(width, d)

        def q_to_registers(self, st):
            tk.load(st.q_regs, st.q[st.q_tile].subtile(16, d, (tk.warp_id() % 4, 0)))    # this warp's 16 rows

        def q_operand(self, st):
            """A of S = Q K^T: this warp's query rows in registers, or the warpgroup's query tile."""
            return st.q_regs if q_registers else st.q[st.q_tile]

        def redo_s(self, st, scores, k_rows):
            """S = Q K^T again (stale_shift's redone step), and every MMA of the warpgroup done."""
            tk.warpgroup.mm_ABt(scores, self.q_operand(st), k_rows)
            tk.warpgroup.mma_async_wait()

        def rescale(self, st, scores, probs):
            tk.mul_row(st.out, st.out, st.factor)                # O to the new running max
            tk.copy(probs, scores)                               # P for O += P V

        def by_width(self, st, k, step):
            """step(kv), or with last_kv, step(last_kv) where narrow_step says and step(kv) elsewhere."""
            if not last_kv:
                return step(kv)
            with tk.if_(self.narrow_step(st, k)):
                step(last_kv)
            with tk.else_():
                step(kv)

        def unless_skipped(self, st, k, step):
            """step(), or with skips, only on the warpgroup's steps up to its last; past it the warpgroup only
            takes and hands on its turn (the template waits for and releases the stages)."""
            if not skips:
                return step()
            with tk.if_(k <= st.last_step):
                step()
            with tk.else_():
                if pingpong:
                    _turn(sync_on_turn=True, groups=groups)
                    _turn(sync_on_turn=False, groups=groups)

        if overlap:
            def compute(self, st, inp, k, prev):
                self.unless_skipped(st, k, lambda: self.by_width(
                    st, k, lambda width: self.step(st, inp, k, prev, width)))
        else:
            def compute(self, st, inp, k):
                self.unless_skipped(st, k, lambda: self.by_width(st, k, lambda width: self.step(st, inp, k, width)))

        if overlap:
            def step(self, st, inp, k, prev, width=kv):
                """Step k issues S_k = Q K_k^T and then O += P_{k-1} V_{k-1} (P kept from step k-1, V_{k-1}
                from the previous stage), then waits for S_k alone and runs its softmax (the issue itself lasts
                about as long as the products: see OVERLAP); the last step adds its own P V. One branch per
                case: the assembler keeps the MMAs asynchronous only if every path waits before it reads an
                accumulator. `width`: K_k's rows in use (kv, or last_kv on a narrow step, a task's last)."""
                (scores, probs), k_rows = self.tiles(st, width), self.rows_of(inp.k, width)
                if pingpong:
                    _turn(sync_on_turn=True, groups=groups)
                with tk.if_(k > 0):
                    tk.mark("turn taken")                       # (timeline marks: no code unless TKPY_TIMELINE=1)
                    tk.warpgroup.mm_ABt(scores, self.q_operand(st), k_rows)
                    tk.mark("S issued")
                    tk.warpgroup.mma_AB(st.out, st.probs, prev.v)
                    tk.mark("P V issued")
                    if pingpong:
                        _turn(sync_on_turn=False, groups=groups)
                    tk.warpgroup.mma_async_wait(1)          # S_k; O += P_{k-1} V_{k-1} still running
                    tk.mark("S arrived")
                    if stale_shift:     # (the vote's barrier keeps the P V wait below the exponentials)
                        self.softmax_on_stale_shift(st, k, scores, lambda: self.redo_s(st, scores, k_rows))
                    else:
                        self.softmax(st, k, scores)
                        # The assembler would otherwise move the wait above the softmax's exp2s: it keeps shared
                        # stores before the wait, and the row sums depend on every exp2.
                        tk.store(st.anchor[tk.warp_id()], st.row_sum)
                        tk.mark("softmax: row sums")
                    tk.warpgroup.mma_async_wait()           # O and P are free again
                    tk.mark("P V done")
                    if not stale_shift:                         # (stale_shift: rescaled where the step was redone)
                        tk.mul_row(st.out, st.out, st.factor)
                with tk.else_():
                    tk.warpgroup.mm_ABt(scores, self.q_operand(st), k_rows)
                    if pingpong:
                        _turn(sync_on_turn=False, groups=groups)
                    if next_q_in_step:                          # the next task's Q into the other buffer (start
                        with tk.if_(st.has_next_task()):        # counted this task already)
                            self.load_q(st, st.next_task(), st.tasks_done % 2)
                    tk.warpgroup.mma_async_wait()
                    tk.mark("S arrived (no P V running)")
                    self.softmax(st, k, scores)          # (no rescale: O is still zero)
                # P converted once for both paths: with a conversion in each, ptxas copied P's 32 registers into
                # the ones the next P V reads at every step. (O's rescale stays in the k > 0 path, after its wait:
                # the assembler keeps the MMAs asynchronous only if every path waits before it writes an
                # accumulator; the first step has nothing to rescale.) Packing P into a
                # second tile beside the exponentials instead (no wait for P_{k-1} V) ran 8% slower at D64 and
                # does not fit D128's registers (RESULTS.md run 111).
                tk.copy(probs, scores)
                tk.mark("O rescaled, P converted")
                with tk.if_(k == self.last_step(st)) if width == kv else contextlib.nullcontext():
                    tk.warpgroup.mma_AB(st.out, probs, self.rows_of(inp.late.v if split_kv else inp.v, width))
                    if split_kv:                # V_k from its late stage; with nothing left in flight, the
                        tk.warpgroup.mma_async_wait()                               # template releases K_k at once
        else:
            def step(self, st, inp, k, width=kv):
                if pingpong:
                    _turn(sync_on_turn=True, groups=groups)
                scores, probs = self.tiles(st, width)
                k_rows = self.rows_of(inp.k, width)
                tk.warpgroup.mm_ABt(scores, self.q_operand(st), k_rows)
                tk.warpgroup.mma_async_wait()                    # S, and the previous step's O += P V
                if pingpong:                                    # the other's S runs during this softmax
                    _turn(sync_on_turn=False, groups=groups)
                if stale_shift:                                  # (the first step sets the shift)
                    with tk.if_(k > 0):
                        self.softmax_on_stale_shift(st, k, scores, lambda: self.redo_s(st, scores, k_rows))
                    with tk.else_():
                        self.softmax(st, k, scores)              # (no rescale: O is still zero)
                    tk.copy(probs, scores)
                else:
                    self.softmax(st, k, scores)
                    self.rescale(st, scores, probs)
                tk.warpgroup.mma_AB(st.out, probs, self.rows_of(inp.v, width))

        def finish(self, g, st, task):
            b, h = tk.let(task.col // g.Q.depth, "b"), tk.let(task.col % g.Q.depth, "h")   # (once: O's and L's stores)
            unit = tk.let(self.unit(g, task, tk.warpgroup.id()), "unit")   # this warpgroup's rows (64-row units)
            # O / l as O * (1 / l): one division per row instead of an IEEE division (~8 instructions) per element
            # (RESULTS.md run 164); rows that see no key (causal, split-K): 0 * (1 / tiny) = 0.
            if causal or split_k:
                tk.map(st.factor, lambda total: 1.0 / tk.max(total, 1e-30), st.row_sum)
            else:
                tk.map(st.factor, lambda total: 1.0 / total, st.row_sum)
            tk.mul_row(st.out, st.out, st.factor)
            tk.mark("finish: O normalized")
            if q_preload:       # the next task's Q out of the tile (every S of this task is done) before O goes in
                with tk.if_(st.has_next_task()):
                    tk.wait(st.q_arrived[st.q_tile], st.tasks_done % 2)
                    self.q_to_registers(st)
                tk.mark("finish: next Q in registers")
            if split_k:         # O (fp32) straight from the registers into split s's rows of the workspace
                b = task.split * g.Q.batch + b
                with tk.if_(unit >= 0) if pad_first else contextlib.nullcontext():
                    tk.warpgroup.store(g.O, st.out, (b, h, unit, 0), masked=True)
                tk.fence_proxy_async()          # every warp's reads of the query tile before TMA writes it again
                _own_sync(groups)
                self.store_lse(g, st, b, h, unit)
                return
            tk.warpgroup.store(st.q[st.q_tile], st.out)          # O through the query tile's shared memory:
            tk.fence_proxy_async()                               # every MMA reading Q is done; TMA reads it
            tk.mark("finish: O in shared")
            _own_sync(groups)                                    # through the async proxy
            tk.mark("finish: O complete in shared")
            stores = tk.warp_id() % 4 == 0                       # rows past N are clipped (padding before row 0:
            if pad_first:                                        # nothing to store)
                stores = stores & (unit >= 0)
            with tk.if_(stores):
                tk.tma.store_async(g.O, st.q[st.q_tile], (b, h, unit, 0))
                tk.tma.store_commit_group()
                tk.tma.store_async_wait(read_only=True)         # a later task's Q may land there
            tk.mark("finish: O store read")
            if q_preload:       # no warp writes the tile again (the next O) before the store has read it: without the
                _own_sync(groups)   # wait for a Q at the next start, a task of no steps got there first
                tk.mark("finish: tile free")
            if lse:
                self.store_lse(g, st, b, h, unit)

        def store_lse(self, g, st, b, h, unit):
            """lse = ln(sum_j e^(s_j * scale)) = (max * scale_log2 + log2(sum_j 2^(s_j * scale_log2 - shift))) * ln 2
            per row into L, with shift = max * scale_log2 as P used it; -inf for rows that see no key (log2(0) +
            -FLT_MAX, or -inf where no step ran)."""
            tk.map(st.row_sum, lambda total, m: (tk.log2(total) + m) * (1.0 / LOG2E), st.row_sum, st.shift)
            real = (unit >= 0) if pad_first else (unit * 64 < g.Q.rows) if interleaved else None
            with tk.if_(real) if real is not None else contextlib.nullcontext():   # (L has lse_rows(N) rows)
                tk.store(g.L, st.row_sum, (b, h, unit * 4 + tk.warp_id() % 4))

        def done(self, st):
            """The turns go round the ring across tasks (a task of no steps takes none); warpgroup 0 takes back
            the last warpgroup's final hand-off."""
            if pingpong:
                with tk.if_(tk.warpgroup.id() == 0):
                    tk.named_sync(TURN[0], 8)

    return Attention


def checked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """A TypeError or ValueError naming what attention cannot take (shapes, dtypes and devices only: the
    operator's fake implementation checks with it too)."""

    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"attention: {name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"attention expects (batch, heads, seq, head_dim) tensors; {name} has shape "
                             f"{tuple(x.shape)}")
    if q.dtype not in DTYPES:
        raise ValueError(f"attention supports bf16 and fp16 tensors, got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k and v must have the same dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on the same device; got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (a value head dim other than the key's is not "
                         f"supported); got {tuple(k.shape)} and {tuple(v.shape)}")
    (b, h, _, d), (bk, hkv, nk, dk) = q.shape, k.shape
    if bk != b:
        raise ValueError(f"q has batch {b} but k and v have batch {bk}")
    if dk != d:
        raise ValueError(f"q has head dim {d} but k and v have head dim {dk}")
    if d not in HEAD_DIMS:
        raise ValueError(f"head dim {d} is not supported (supported: multiples of 16 from 16 to 256)")
    if hkv == 0 or h % hkv:
        raise ValueError(f"query heads ({h}) must be a multiple of key/value heads ({hkv}) (GQA/MQA)")
    if nk == 0:
        raise ValueError("attention over zero keys is undefined (k and v have sequence length 0)")
    check_device("attention", q)


def _usable(x: torch.Tensor) -> torch.Tensor:
    """x itself when the kernel can read it in place (tma_ready: e.g. a (B, N, H, D) tensor transposed to
    (B, H, N, D)); otherwise (also where it repeats a dim, e.g. k.expand(batch, ...)) a contiguous copy."""
    return x if tma_ready(x) else x.contiguous()


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool | str = False,
            scale: float | None = None, return_lse: bool = False):
    """softmax(q k^T * scale [+ causal mask]) v for (batch, heads, seq, head_dim) tensors: the launch behind
    tkpy.kernels.attention_forward (the torch operator, kernels/attention_op.py).

    - dtypes: bf16 or fp16 (all three the same); head dims: multiples of 16 from 16 to 256 (64, 128 and 256
      tuned, the others taking the settings of the next tuned one up: tuned); CUDA tensors (or any device
      under TKPY_INTERPRET=1, which runs tkpy's CPU interpreter).
    - k and v: (batch, kv_heads, seq_k, head_dim) with kv_heads dividing heads: grouped-query and
      multi-query attention (query head h reads key/value head h // (heads / kv_heads), as torch's
      enable_gqa). Any seq and seq_k >= 1, equal or not.
    - causal=True is torch's `scaled_dot_product_attention(is_causal=True)`: the top-left aligned mask,
      query i sees keys j <= i (for seq == seq_k this is the usual lower triangle).
      causal="bottom_right" aligns the diagonal to the last key instead (FlashAttention's causal,
      torch.nn.attention.bias.causal_lower_right): query i sees keys j <= i + seq_k - seq. Query rows
      that see no key (bottom-right with seq > seq_k) output 0 with a log-sum-exp of -inf.
    - scale: defaults to 1 / sqrt(head_dim); any value (the kernel takes a positive one: a negative
      scale runs on -k with |scale|, a zero scale on a zero k with scale 1, both exact).
    - return_lse: also return the fp32 natural-log log-sum-exp of each row's scaled scores,
      (batch, heads, seq), contiguous, as a backward pass needs.
    GQA/MQA with few query rows (decoding) runs each key/value head's query heads as one sequence
    (packed_heads), so that a query tile is not mostly padding.
    Inputs whose last dim is contiguous with 16-byte aligned strides are read in place (e.g. a
    (B, N, H, D) tensor transposed to (B, H, N, D)); others are copied with .contiguous(). The
    output is a new contiguous tensor.
    """
    signature = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.device,
                 causal, scale is None or (scale < 0, scale == 0), return_lse, tk.interpret_requested())
    plan = _FORWARD_PLANS.get(signature)
    if plan is None:
        checked(q, k, v)
        plan = _FORWARD_PLANS[signature] = _ForwardPlan(q, k, causal, return_lse)
    return plan(q, k, v, scale)


_FORWARD_PLANS: dict = {}


class _ForwardPlan:
    """forward for one signature of inputs (shapes, strides, dtypes, device, causal, the scale's sign, return_lse):
    the checks passed and the choices made (head packing, consumer warpgroups, the kernel _prepared picks, its
    scalar arguments) on the first call, from shapes alone; a call then allocates, checks pointers and launches."""

    def __init__(self, q, k, causal, return_lse):
        (b, h, n, d), hkv = q.shape, k.shape[1]
        self.group = packed_heads(q, hkv)
        h_run, n_run = (hkv, self.group * n) if self.group > 1 else (h, n)
        self.groups = consumer_warpgroups_for(b, h_run, n_run, d, multiprocessors(q),
                                              causal_variant(causal) is not None and self.group == 1)
        self.causal, self.return_lse = causal, return_lse
        self.run_shape = (b, h_run, n_run, d)
        self.default_scale = 1.0 / math.sqrt(d)
        self.launch = None           # the kernel on its grid, from the first call

    def __call__(self, q, k, v, scale):
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        q_run, o_run = (q.view(self.run_shape), o.view(self.run_shape)) if self.group > 1 else (q, o)
        lse = torch.empty(*self.run_shape[:2], lse_rows(self.run_shape[2], self.groups), dtype=torch.float32,
                          device=q.device) if self.return_lse else None
        if o.numel():
            self._launch(q_run, k, v, o_run, lse, scale)
        return (o, lse[..., :self.run_shape[2]].reshape(o.shape[:3]).contiguous()) if self.return_lse else o

    def _launch(self, q, k, v, o, lse, scale):
        if self.launch is None:      # _prepared's choices, once (it reads tensors: first_clean compiles on them)
            template, args = _prepared(q, k, v, o, lse, self.causal, scale, consumer_warpgroups=self.groups,
                                       packed=self.group)
            outputs = 1 + (lse is not None) if not template.scheduler.splits_k else 2
            self.scalars = tuple(args[3 + outputs + 1:])
            self.workspaces = [tuple(w.shape) for w in args[3:3 + outputs]] if template.scheduler.splits_k else None
            self.layouts = tma_layout(q), tma_layout(k), tma_layout(v)
            launch = template.bind(*args)      # (the grid reads shapes only, which the plan's signature fixes)
        else:
            launch = self.launch
            keys, scale = _positive_scale(k, self.default_scale if scale is None else float(scale))
            if self.workspaces is not None:
                outputs = [torch.empty(shape, dtype=torch.float32, device=q.device) for shape in self.workspaces]
            else:
                outputs = (o,) if lse is None else (o, lse)
            q_ok, k_ok, v_ok = self.layouts
            args = (q if q_ok and q.data_ptr() % ALIGN == 0 else q.contiguous(),
                    keys if k_ok and keys is k and k.data_ptr() % ALIGN == 0 else keys.contiguous(),
                    v if v_ok and v.data_ptr() % ALIGN == 0 else v.contiguous(), *outputs, scale * LOG2E,
                    *self.scalars)
        launch(*args)
        self.launch = launch
        if self.workspaces is not None:      # the splits' results in the workspaces, merged into o and lse
            _combine(q, o, lse, args)


def packed_heads(q: torch.Tensor, hkv: int) -> int:
    """How many query heads attention() runs as one sequence (1: none). Grouped-query attention gives the same
    result with a group's rows stacked, query head h * group + g's row i being row g * n + i of key/value head h
    (causal kernels then mask each row by its own position, i = row % n: packed=True); attention() does that where
    it takes fewer 128-row query tiles (n not a multiple of 128: decoding's few rows above all, where one head's
    rows would leave most of a tile empty) and q's heads and rows merge into one dimension without a copy."""
    (_, h, n, _), group = q.shape, q.shape[1] // hkv
    if group == 1 or (n > 1 and q.stride(1) != n * q.stride(2)):
        return 1
    return group if cdiv(group * n, Q_ROWS) < group * cdiv(n, Q_ROWS) else 1


def _launch(q, k, v, o, lse, causal, scale, **options) -> None:
    """Run the kernel on checked inputs into `o` (b, h, n, d) and `lse` (b, h, at least lse_rows(n,
    consumer_warpgroups): n rounded up to 64 times the consumer warpgroups), or None: a kernel that computes no
    log-sum-exp (under split-K the splits' still, merged into a scratch buffer). The options are _attention's; by
    default, as attention() runs: consumer_warpgroups from consumer_warpgroups_for, split K/V rings from
    split_kv_for, clusters from cluster_for and splits from splits_for. packed=G: each sequence of q stacks G query
    heads of n / G rows (attention()'s packed_heads; causal kernels then mask by the position in each head)."""
    prepared = _prepared(q, k, v, o, lse, causal, scale, **options)
    if prepared is not None:
        template, args = prepared
        template(*args)
        if template.scheduler.splits_k:         # the splits' results in the workspaces, merged into o and lse
            _combine(q, o, lse, args)


def _combine(q, o, lse, args) -> None:
    """Merge a split-K kernel's workspaces (its arguments 3 and 4; its last, the splits) into o and lse (None: into
    a scratch buffer)."""
    b, h, n, d = q.shape
    if lse is None:                             # (rows padded to a 16-byte stride)
        lse = torch.empty(b, h, cdiv(n, 4) * 4, dtype=torch.float32, device=q.device)
    combine_kernel(d, DTYPES[q.dtype], args[-1])[combine_grid(b, h, n, d)](args[3], args[4], o, lse)


def _prepared(q, k, v, o, lse, causal, scale, consumer_warpgroups: int | None = None, split_kv: bool | None = None,
              cluster: int | None = None, splits: int | None = None, packed: int = 1, **options):
    """_launch's kernel template and its arguments (None when the output is empty); `options` go to _attention
    as they are (cluster by default from cluster_for; last_kv from last_kv_for; q_ahead, and for 2 warpgroups on
    one ring Q_AHEAD_KV's key tiles in lockstep, where few_keys_options says; kv, stages and late_stages from
    CONFIGS_STREAM where the tasks stream K and V, streaming, and none of them or last_kv is given, else the
    kernel's; `splits` tasks per query tile, split-K, from splits_for: with more than 1 the kernel's O and L are
    fp32 workspaces, which _launch merges into o and lse; lse None: a kernel without L, lse=False, but under
    split-K; stale_shift by default as _attention's, and at STALE_WHERE_IT_FITS's head dims where that kernel
    compiles clean; the kernel's index math by divisors (fast_division) where each block runs FAST_DIVISION_TASKS
    tasks or more and, on the GPU, that compiles without spills under this NVRTC, by C++'s division otherwise; and
    the cluster pairs cluster_for picks, on the GPU where they compile clean, single blocks otherwise)."""
    variant = causal_variant(causal)
    if consumer_warpgroups is None:
        consumer_warpgroups = consumer_warpgroups_for(*q.shape, multiprocessors(q), variant is not None and packed == 1)
    if split_kv is None:
        split_kv = split_kv_for(k.shape[2], q.shape[3], consumer_warpgroups, variant is not None)
    (n, d), nk = q.shape[2:], k.shape[2]
    if not o.numel():
        return None
    if lse is not None and lse.shape[-1] < lse_rows(n, consumer_warpgroups):
        raise ValueError(f"the log-sum-exp buffer needs {lse_rows(n, consumer_warpgroups)} rows (n rounded up to "
                         f"{q_rows(consumer_warpgroups)}), got {lse.shape[-1]}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    k, scale = _positive_scale(k, scale)
    options.update(few_keys_options(nk, d, consumer_warpgroups, split_kv, options))
    stream = stream_tiles(q, k, consumer_warpgroups, split_kv)
    if stream and not options.keys() & {"kv", "stages", "late_stages", "last_kv"}:
        options.update(zip(("kv", "stages", "late_stages"), stream))
    kv = options.get("kv") or default_tiles(d, consumer_warpgroups, split_kv)[0]
    if splits is None:
        splits = splits_for(*q.shape, nk, kv, consumer_warpgroups, multiprocessors(q))
    if splits < 1:
        raise ValueError(f"attention: splits (tasks per query tile) must be at least 1, got {splits!r}")
    if splits > 1:                              # fp32 workspaces of splits x batch rows for O and the lse
        b, h = q.shape[:2]
        outputs = [torch.empty(splits * b, h, n, d, dtype=torch.float32, device=q.device),
                   torch.empty(splits * b, h, lse_rows(n, consumer_warpgroups), dtype=torch.float32, device=q.device)]
    else:
        outputs = [o] if lse is None else [o, lse]
    args = [_usable(q), _usable(k), _usable(v), *outputs, scale * LOG2E]
    if variant is not None:                     # (packed: each sequence stacks `packed` heads of n / packed rows)
        args.append(0 if variant == "top_left" else nk - n // packed)
        if packed > 1:
            args.append(n // packed)
    if splits > 1:
        args.append(splits)
    picked_pairs = cluster is None
    if cluster is None:
        odd = whole_clusters(variant is not None, consumer_warpgroups, packed > 1 and variant is not None,
                             options.get("skip_masked"), options.get("pad_first"))
        cluster = 1 if splits > 1 else cluster_for(n, d, consumer_warpgroups, variant is not None, odd=odd)
    if "last_kv" not in options:
        options["last_kv"] = last_kv_for(nk, kv, diagonal=variant is not None and packed == 1)
    tasks = cdiv(n, q_rows(consumer_warpgroups)) * q.shape[0] * q.shape[1] * splits
    if "fast_division" not in options and tasks < FAST_DIVISION_TASKS * multiprocessors(q):
        options["fast_division"] = False
    kernel = functools.partial(_attention, d, DTYPES[q.dtype], variant is not None,
                               consumer_warpgroups=consumer_warpgroups, split_kv=split_kv, cluster=cluster,
                               split_k=splits > 1, lse=lse is not None or splits > 1,
                               **({"packed": True} if packed > 1 and variant is not None else {}), **options)
    choices = clean_choices(d, consumer_warpgroups, options, q.is_cuda, picked_pairs and cluster > 1)
    return first_clean(kernel, args, choices) or kernel(), args


def clean_choices(d: int, consumer_warpgroups: int, options: dict, on_gpu: bool, pairs: bool) -> list[dict]:
    """The options _prepared tries in turn, the kernel of the first that compiles clean run (first_clean; none
    clean: the kernel as given): stale_shift at STALE_WHERE_IT_FITS's head dims; on the GPU (the interpreter divides
    as C++ either way) the index math by divisors, then by C++'s division (DIVISION_CHOICES); and with `pairs`
    (cluster pairs that cluster_for picked) single blocks after each, where the pair's kernel spills: D128's causal
    pairs spill 16 bytes under NVRTC 13.5, none under 13.0. Divisors go before pairs, the larger gain (runs 232,
    240)."""
    choices = [dict(stale_shift=True)] if tuned(d) in STALE_WHERE_IT_FITS and consumer_warpgroups == 2 \
        and "stale_shift" not in options and options.get("pingpong", PINGPONG) is True else []
    if "fast_division" not in options and on_gpu:
        choices = [dict(choice, **division) for choice in choices + [{}] for division in DIVISION_CHOICES]
    if pairs and on_gpu:
        choices = [dict(choice, **single) for choice in choices or [{}] for single in ({}, dict(cluster=1))]
    return choices


def first_clean(kernel, args, choices) -> object | None:
    """kernel(**choice) for the first of `choices` that compiles clean (_compiles_clean), or None."""
    for choice in choices:
        template = kernel(**choice)
        if _compiles_clean(template, args):
            return template
    return None


_CLEAN: dict[str, bool] = {}
# The index math by divisors, or by C++'s division where the divisors' registers cost the kernel spills (_prepared)
DIVISION_CHOICES = ({}, dict(fast_division=False))


def _compiles_clean(template, args) -> bool:
    """Whether the template's kernel compiles without spilling registers and with its wgmma asynchronous
    (kernel.resources: NVRTC, no GPU; once per kernel and process, its source being the same for any sizes)."""
    name = template.kernel.name
    if name not in _CLEAN:
        with warnings.catch_warnings():                 # (a kernel that spills is not run: no warning)
            warnings.simplefilter("ignore", SpillWarning)
            r = template.kernel.resources(*args)
        _CLEAN[name] = not r.spills and not any("Performance Loss" in w for w in r.warnings)
    return _CLEAN[name]


def splits_for(b: int, h: int, n: int, d: int, nk: int, kv: int, consumer_warpgroups: int, sms: int) -> int:
    """Tasks per query tile (split-K) attention() runs over nk keys in tiles of kv rows: 1 while the tasks fill half
    the SMs (or SPLIT_K_DEFAULT is off, or 3 consumer warpgroups, or a head dim not in SPLIT_K_DIMS); otherwise as
    many as fill the SMs, each at least SPLIT_MIN_STEPS key tiles, at most MAX_SPLITS."""
    tasks = b * h * cdiv(n, q_rows(consumer_warpgroups))
    if not SPLIT_K_DEFAULT or consumer_warpgroups == 3 or tuned(d) not in SPLIT_K_DIMS or 2 * tasks > sms:
        return 1
    return splits_to_fill(tasks, nk, kv, sms)


def splits_to_fill(tasks: int, nk: int, kv: int, sms: int) -> int:
    """Tasks per query tile that fill `sms` SMs with `tasks` query tiles over nk keys in tiles of kv rows: each
    split at least SPLIT_MIN_STEPS key tiles, at most MAX_SPLITS splits, at least 1."""
    return max(1, min(sms // tasks, cdiv(nk, kv) // SPLIT_MIN_STEPS, MAX_SPLITS))


COMBINE_COLS = 16                   # columns of O per warp of combine_kernel


@functools.cache
def combine_kernel(d: int, dtype, splits: int):
    """Merges split-K results (flash-decoding): for each query row, the `splits` partial outputs O_s (normalized
    over their own keys) and log-sum-exps l_s become O = sum_s e^(l_s - l) O_s and l = ln sum_s e^(l_s) (rows
    that see no key in any split: O = 0, l = -inf). Launched on combine_grid: a warp per 16 rows and COMBINE_COLS
    columns, which loads every split's slice before it adds any (16 splits of 16 x 16 fp32 are 128 registers a
    thread), so that its time is one round trip to L2 and not one per split (RESULTS.md runs 132-133); rows past N are
    skipped."""
    @tk.kernel(warps=4, name=f"attention_combine_d{d}" + ("" if dtype == bf16 else f"_{dtype.name}") + f"_s{splits}")
    def combine(Ow: tk.gl[f32, "SB", "H", "N", d], Lw: tk.gl[f32, "SB", "H", "NW"],
                O: tk.gl[dtype, "B", "H", "N", d], L: tk.gl[f32, "B", "H", "NL"]):
        col = tk.let(tk.block_idx.z * 4 + tk.warp_id(), "col")                  # COMBINE_COLS-column units
        units = d // COMBINE_COLS                                           # (the last block's warps may pass d)
        with tk.if_(col < units) if units % 4 else contextlib.nullcontext():
            out = tk.rt(f32, 16, COMBINE_COLS)
            parts = [tk.rt(f32, 16, COMBINE_COLS, name="part") for _ in range(splits)]
            weights = [tk.col_vec(out, name="weight") for _ in range(splits)]
            top, total, denominator = tk.col_vec(out), tk.col_vec(out), tk.col_vec(out)
            row = tk.block_idx.x                                                # 16-row units
            b, h = tk.block_idx.y // O.depth, tk.block_idx.y % O.depth
            for s, (weight, part) in enumerate(zip(weights, parts)):
                tk.load(weight, Lw, (s * O.batch + b, h, row))
                tk.load(part, Ow, (s * O.batch + b, h, row, col), masked=True)
            tk.fill(top, -FLT_MAX)                  # (so a row that sees no key weighs its splits e^-inf = 0)
            for weight in weights:
                tk.max(top, top, weight)
            tk.zero(total)
            for weight in weights:                  # each split's log-sum-exp becomes its weight e^(l_s - max)
                tk.map(weight, lambda l, m: tk.exp2((l - m) * LOG2E), weight, top)
                tk.add(total, total, weight)
            tk.max(denominator, total, 1e-30)
            tk.zero(out)
            for weight, part in zip(weights, parts):
                tk.mul_row(part, part, weight)
                tk.add(out, out, part)
            tk.div_row(out, out, denominator)
            tk.store(O, out, (b, h, row, col), masked=True)
            with tk.if_(col == 0):
                tk.map(total, lambda t, m: m + tk.log2(t) * (1.0 / LOG2E), total, top)
                tk.store(L, total, (b, h, row), masked=True)
    return combine


def combine_grid(b: int, h: int, n: int, d: int) -> tuple[int, int, int]:
    """combine_kernel's blocks: 16-row units of n, b x h heads, and d over 4 warps of COMBINE_COLS columns."""
    return cdiv(n, 16), b * h, cdiv(d, 4 * COMBINE_COLS)


def _positive_scale(k: torch.Tensor, scale: float) -> tuple[torch.Tensor, float]:
    """Keys and a positive scale giving the same scores q k^T * scale: the kernel takes the running max of
    the raw scores, which is the max of the scaled ones only for a positive scale. A negative scale: -k
    (negation is exact) and |scale|; zero: every score is 0, as q zeros^T * 1. (NaN passes through.)"""
    if scale < 0:
        return -k, -scale
    if scale == 0:
        return torch.zeros_like(k), 1.0
    return k, scale
