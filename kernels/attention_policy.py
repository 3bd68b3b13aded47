"""The policy of kernels/attention_kernel.py's attention forward: which options (attention_config.AttentionConfig)
attention() runs for a shape on a GPU of some SMs. Its tuning tables were measured on the H200 (MEASURED_ON); each
table's rows carry their evidence in EVIDENCE (runs of RESULTS.md), and tests/test_attention_policy.py keeps a golden
record of the choices they make. CONFIGS' and CONFIGS_SPLIT's rows can be re-measured on another GPU
(tkpy.kernels.tune): that GPU's rows, kept in tkpy's disk cache, then stand in for the shipped ones there.

attention() runs D64 with 3 consumer warpgroups on split K/V rings (CONFIGS_SPLIT_3WG) unless a 128-row task layout
takes fewer waves of the SMs for the sequence at hand (consumer_warpgroups_for); D128 causal from 1024 to 16383
query rows with 3 on one ring of 64-row tiles (CAUSAL_GROUP_ROWS), otherwise with 2 warpgroups and one ring, but
non-causal from 2048 keys on with split rings of 176-row tiles (split_kv_for), or of 128-row tiles with a V stage
more where few query tiles read each key/value head's tiles (streaming: K and V come from memory); past D128, 2
warpgroups on split rings of the tallest tiles that fit (wide_kv).

Head dims: 64, 128 and 256 were tuned on the H200; any other multiple of 16 up to 256 takes the settings of the next
tuned one up (tuned: D96 runs D128's kernels on narrower tiles), whose registers and shared memory its tiles need at
most.

Decoding and other few-row shapes: GQA runs each key/value head's query heads as one sequence (packed_heads;
causal kernels mask each row by its position in its own head, packed=True), a head's rows that fit 64 run on one
consumer warpgroup (tasks of 64 rows, no turns), and where the tasks fill at most half the SMs their keys are
shared among several tasks (split-K, flash-decoding: splits_for), whose fp32 partial results combine_kernel merges.
"""
from __future__ import annotations

import math

import torch

from tkpy.tune import tuned_rows

from .tensor_layout import cdiv

# The GPU the tables below were measured on (CONFIGS and CONFIGS_SPLIT: tkpy.kernels.tune re-measures them on another,
# whose rows then stand in for these there: tuned_rows).
MEASURED_ON = "NVIDIA H200"
Q_ROWS = 128                        # query rows per task of the default kernels (64 per consumer warpgroup)
CONSUMER_WARPGROUPS = 2             # the default; 3 takes 192 query rows per task (see CONFIGS_3WG)
# The head dims whose settings below were tuned on the H200; a kernel of another head dim (a multiple of 16 up to
# 256: D80, D96, D160, ...) takes those of the next tuned one up (tuned), whose tiles need at least its registers
# and shared memory.
TUNED_DIMS = (64, 128, 256)
# head dim -> (key/value rows per stage, stages): K and V tiles of every stage, and the 128 x D query
# tile, fit in shared memory (D=128: 32 KB + 3 x 64 KB); S (16 x kv rows), P and O (16 x D) of each warp
# fit in its registers. A consumer releases a stage one step after it arrived, so 3+ stages keep the
# next step's tiles in flight while the current ones are in use. D=64 takes 160-row tiles: its MMAs are
# short next to the softmax, and fewer, longer steps measured faster than 128.
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
# ran faster on one-row decoding. D128 measured level with 64-row tiles in 5-6 stages.
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
# CONFIGS_STREAM's shorter tiles with a V stage more (V_k loads two steps ahead).
STREAM_READERS = 4
CONFIGS_STREAM = {128: (128, 2, 3)}
# Speed of a full machine of tasks per query row, relative to 2 consumer warpgroups with one ring, of the
# kernels attention() picks between (benchmarks/bench_attention.py --compare), the wave counts taken out: at D64, 3
# warpgroups with split K/V rings and cluster pairs; at D128 they were no better than the default on the whole, and
# are not picked.
GROUP_RATE = {64: {2: 1.0, 3: 1.25}, 128: {2: 1.0}, 256: {2: 1.0}}
# ... and causal, for query lengths in CAUSAL_GROUP_ROWS: D128 with 3 warpgroups on one ring of CONFIGS_3WG's 64-row
# key tiles (CAUSAL_ONE_RING_3WG) against 2 (in cluster pairs from 32 query tiles); split rings were behind one.
CAUSAL_GROUP_RATE = {128: {2: 1.0, 3: 1.04}}
CAUSAL_GROUP_ROWS = {128: range(1024, 16384)}
CAUSAL_ONE_RING_3WG = (128,)
# Head dims whose 2-warpgroup kernels keep each warp's query rows in registers for S = Q K^T (q_registers) when their
# key tiles have 128 rows or fewer; D64's default has 3 warpgroups, and S and P of longer tiles leave no room (the
# split rings' 176 rows spill). The serial schedule (overlap=False) keeps Q in shared memory: NVRTC 13.0 miscompiles
# it with Q in registers (AttentionConfig refuses it).
Q_REGISTERS = (128,)
# Head dim -> keys up to which attention()'s kernels (2 or 3 consumer warpgroups, Q in shared memory) load each
# consumer's next query tile while it works on its current one (q_ahead): a task of 2-4 key tiles otherwise spends
# a large part of its time waiting for its own Q at its start. (D128's kernels keep Q in registers and preload the
# next one: q_preload.)
Q_AHEAD_KEYS = {64: 512}
# ... and head dim -> key/value rows per tile of the 2-warpgroup kernels there, which split 128 and 256 keys evenly.
# Their warpgroups run in lockstep (pingpong=False): a task of 1-2 steps has no next step for a turn to overlap.
Q_AHEAD_KV = {64: 128}
# (head dim, consumer warpgroups, causal) whose kernels attention() runs in clusters of two blocks on adjacent query
# tiles of a head (cluster=2; K and V multicast, one by each block) when a head's query tiles pair up; D128 causal
# from CAUSAL_PAIR_TILES (below); the cases not timed stay unclustered.
CLUSTER_PAIRS = {(64, 3, False), (64, 3, True), (128, 2, False), (128, 2, True), (256, 2, False), (256, 2, True)}
# ... causal ones only from this many query tiles a head (per head dim): a causal pair loads the key tiles of its
# longer tile, which its other block skips, about 1 / (tiles + 1) of the head's steps. An odd number pairs up with
# a tile of padding before row 0 (next to the tile that sees the fewest keys).
CAUSAL_PAIR_TILES = {64: 8, 128: 32, 256: 8}
# ... and non-causal 3-warpgroup ones (whose units interleave, see the kernel's `unit`) also on an odd number of query
# tiles a head from this many, the pair then taking a last tile of padding.
ODD_PAIR_TILES = 13
# Head dim -> keys from which attention() runs the 2-warpgroup kernel with split K/V rings (CONFIGS_SPLIT),
# non-causal, in cluster pairs, with the partial last tile's step on the keys it holds (last_kv); below, the default
# keeps Q in registers and preloads it, which pays at short sequences.
SPLIT_KEYS = {128: 2048}
# Past D128 the 2-warpgroup kernels run split K/V rings whatever the keys, in 2 + 2 stages of the tallest key tiles
# (a multiple of 16, up to 128) that fit in WIDE_SHARED_BYTES beside the 128 x D query tile (wide_kv: D160 128 rows,
# D192 112, D256 80): one ring of two 64-row stages, the previous default, leaves no load in flight while a step
# holds K_k and V_{k-1}.
WIDE_SHARED_BYTES = 225 * 1024      # the 227 KB a block can have, less the semaphores and the alignment
# The partial last key tile of a sequence (nk not a multiple of the tile's rows) runs its MMAs and softmax on the
# rows it holds, rounded up to 16 (the last_kv option, last_kv_for), instead of a whole tile of masked keys.
NARROW_LAST = True
# Split-K (flash-decoding): few (query tile, head) tasks over many keys share each task's keys among `splits`
# tasks and merge their results (combine_kernel), by splits_for's rule, where the tasks fill at most half the SMs.
# With 1 or 2 consumer warpgroups (3 split well too, but 2 are faster on those shapes and attention() picks them).
FAST_DIVISION_TASKS = 2             # tasks a block runs at least for divisors made at its start to pay
SPLIT_K_DEFAULT = True
SPLIT_K_DIMS = (64, 128, 256)       # the head dims timed split
SPLIT_MIN_STEPS = 4                 # key tiles per split at least
MAX_SPLITS = 16
PINGPONG = True                     # consumer warpgroups take turns issuing S = Q K^T (named barriers)
# Head dims whose steps after a task's first compute P on the running shift, without this tile's row max, and leave
# O's scale (stale_shift): the exponentials start as S arrives and ~140 instructions a step go (the max's FMNMX and
# shuffles, the rescale's FMULs). A step whose P would pass 2^RESCALE_SLACK in a row's sum is redone with the max.
STALE_SHIFT = (64, 128)
# ... and head dims whose 2-warpgroup kernels take it where they compile without spills (_compiles_clean): past D128
# the kernels are at the edge of their registers, and whether they spill with it depends on the assembler (under
# NVRTC 13.5 D160-D192 a little, D256 more; under 13.0, the H200's, only D256 causal).
STALE_WHERE_IT_FITS = (256,)
OVERLAP = True                      # step k issues S_k and step k-1's O += P V together (FlashAttention-3)
# (A warp issuing a wgmma waits until the tensor core takes it, so most of that P V has run by the time S_k's
# softmax starts: the timeline, benchmarks/attention_timeline.py. The overlap that pays is between the warpgroups;
# this order still measured faster than the serial one.)
# Head dims whose one-warpgroup kernels (decoding) run the serial schedule with one ring: a step holds one stage, not
# two.
SERIAL_ONE_GROUP = (128,)
# A cold cache's first calls (tk.QuickFirstCall): the options of a kernel that compiles in 0.4-0.45 s where the
# tuned one takes 0.6-2.3 s (the serial schedule, one ring, single blocks, P from each tile's row max, no narrow last
# tile, C++'s division), run until the tuned kernel has compiled in the background.
QUICK_FIRST_CALL = dict(overlap=False, cluster=1, split_kv=False, stale_shift=False, last_kv=None, fast_division=False)
QUICK_KV = {128: 64}                # ... and their key/value tiles where not the default's
# Variants that measured slower and left the kernel (RESULTS.md keeps them).
SLOWER_VARIANTS = {
    "turns round the softmax's exponentials instead of the MMA issue (softmax turns)": "RESULTS.md runs 55, 225, 243",
    "the previous step's P V issued before S (pv first)": "RESULTS.md runs 112, 115, 187",
    "clusters of four": "RESULTS.md run 118", "two one-warpgroup blocks an SM": "RESULTS.md run 139",
    "a share of P's exponentials by tk.exp2's software emulation (emu n/8)": "RESULTS.md runs 71, 186, 243",
    "the quick first-call kernel at NVRTC's fast-compile level (-Ofc=mid)": "RESULTS.md runs 299-300: 21 against 499 "
        "TFLOP/s at B16 H16 N4096 D128",
}
# The measurements behind the tables, row by row (table -> key -> evidence; a scalar setting's, one string).
EVIDENCE = {
    "CONFIGS": {64: "RESULTS.md runs 22 and 26: 160-row tiles 5-9% faster than 128",
                128: "no run cited (the first tuned default)", 256: "no run cited (the first tuned default)"},
    "CONFIGS_1WG": {256: "RESULTS.md run 136: 5 stages of 32 rows 17% faster on one-row decoding than 2 of 64; D128 "
                         "level with 64-row tiles in 5-6 stages"},
    "CONFIGS_STREAM": {128: "RESULTS.md run 203: 128-row tiles in 2 + 3 stages against 176 in 2 + 2, +3.8% at B4 H32 "
                            "N128 over 8192 keys (1 reader), +5.6% at B8 H32 N128 over 4096, +4.4-7% split-K (B2 and "
                            "B1 H32 N128 over 16384 keys), +1.5% GQA H32/8 N128 (4 readers), +4% B1 H16 N512 over "
                            "32768 (4 readers, 2 splits); level at 2 readers"},
    "STREAM_READERS": "RESULTS.md runs 203-204 and 125: level at 2 readers, 1-3% slower from 8 (run 204), 3% at 128 "
                      "(N16384, run 125)",
    "GROUP_RATE": {64: "RESULTS.md runs 43 and 122: 3 warpgroups 1.02-1.09x (run 43), 1.24-1.49x with the wave counts "
                       "taken out of the measured 1.10-1.32x at B2 N4096, B8/B16 N1024 and B16 N512 (run 122); 1.25 "
                       "keeps the model's choice right in each, but for B2 N4096 causal, 4% slower with 3",
                   128: "RESULTS.md runs 43 and 122: 3 warpgroups 0.87-1.07x, not picked",
                   256: "no measurement: 3 warpgroups take head dims up to 128 (CONFIGS_3WG)"},
    "CAUSAL_GROUP_RATE": {128: "RESULTS.md runs 245-246: 3 warpgroups on one ring 3-5% faster than 2 at N1024-N4096, "
                               "0.8% at N2048, 2% at N8192, level at N16384, 9% slower at N512; split rings 3-6% "
                               "behind one"},
    "CAUSAL_GROUP_ROWS": {128: "RESULTS.md runs 245-246 (see CAUSAL_GROUP_RATE)"},
    "Q_REGISTERS": "RESULTS.md runs 89, 93, 95: D128 0-3% faster in 17 of 18 paired measurements; run 96: NVRTC 13.0 "
                   "miscompiles the serial schedule with Q in registers",
    "Q_AHEAD_KEYS": {64: "RESULTS.md run 220 (3 warpgroups, D64, B = 32768 / N, H16): N128 +20% non-causal, +33% "
                         "causal; N256 +9% and +10%, N384 +4% and +12%, N512 +2% and +4-5%; level at N1000-N4096, "
                         "1-2% behind from N8192"},
    "Q_AHEAD_KV": {64: "RESULTS.md run 221: D64 128-row tiles 3-15% faster than CONFIGS' 160 at N128 and N256; "
                       "lockstep 1-4% faster (runs 225, 227)"},
    "CLUSTER_PAIRS": {(64, 3, False): "RESULTS.md runs 113-114: +3%", (64, 3, True): "RESULTS.md runs 113-114: +3%",
                      (128, 2, False): "RESULTS.md runs 113-114: +1-3.5%",
                      (128, 2, True): "RESULTS.md runs 240-241 (from CAUSAL_PAIR_TILES)",
                      (256, 2, False): "RESULTS.md run 198: +2.5-6% at D160, D192 and D256 N4096",
                      (256, 2, True): "RESULTS.md run 198: +2.5-6% at D160, D192 and D256 N4096"},
    "CAUSAL_PAIR_TILES": {64: "RESULTS.md runs 172, 176, 113-114: 3% slower than single blocks at 6 tiles (N1024), 1% "
                              "faster at 8, 3% at 10, 2% at 12, 3% at 22 (N4096); odd counts with a padding tile "
                              "+1.6-1.7% at 11 and 43 tiles (run 178)",
                          128: "RESULTS.md runs 113-114 (level at N4096 and N16384, 3% slower at N1024) and 240-241 "
                               "(2-4% slower up to 24 tiles, +0.5-1.5% at 32, +0.6% at 64, +1-3% at 128, +2.6% at "
                               "256)",
                          256: "no run of its own cited (D64's threshold); the pairs past D128 timed at N4096 in "
                               "RESULTS.md run 198"},
    "ODD_PAIR_TILES": "RESULTS.md run 177: D64 +3.9% at 43 tiles (N8192), -0.8% at 11 (N2048), -12% at 3 (N512)",
    "SPLIT_KEYS": {128: "RESULTS.md runs 125-126 (176-row split tiles 3.5-5% faster at 8192 and 16384 keys), 155 and "
                        "157 (with last_kv 0.6-3.1% faster from 2048 to 6144 keys), 153-155 (1-5% slower at 1024)"},
    "WIDE_SHARED_BYTES": "RESULTS.md run 195: wide_kv's split rings 0.89-1.02x cuDNN at N4096, one ring of two "
                         "64-row stages 0.57-0.72x",
    "NARROW_LAST": "RESULTS.md run 155: +4% at D128 N1056, +3% at N4000, +1.8% at N8192",
    "SPLIT_K_DEFAULT": "RESULTS.md runs 128-129: 1.5-2.4x one task per query tile and 1.46-2.11x cuDNN where the tasks "
                       "fill at most half the SMs (B1 H32 N128 over 16384 keys, B1 H16 N512 over 32768, ...); D256 "
                       "5.3x unsplit, GQA and bottom-right causal alike",
    "FAST_DIVISION_TASKS": "RESULTS.md runs 231-235",
    "STALE_SHIFT": "RESULTS.md runs 181-182: +7% at D128 N1024 and N4096, +9% at N16384, +8-11% at D64",
    "STALE_WHERE_IT_FITS": "RESULTS.md runs 195 and 198 (without spills D160 and D192 8-10% faster, D256 non-causal "
                           "9%), attention()'s choice in run 200",
    "OVERLAP": "RESULTS.md runs 42 and 57 (faster than the serial order), 74-76 (the timeline)",
    "SERIAL_ONE_GROUP": "RESULTS.md run 141: D128 1.2-6.1% faster in 5 interleaved rounds on five decoding shapes",
    "DIVISION_CHOICES": "RESULTS.md runs 232 and 240: divisors before cluster pairs, the larger gain",
    "QUICK_FIRST_CALL": "RESULTS.md runs 287-288: NVRTC 13.0 on the H200 host 0.29-0.42 s (the defaults 0.61-2.30 "
                        "s), 0.83-0.86x the default's speed at B16 H16 N4096",
    "QUICK_KV": {128: "RESULTS.md run 288: D128 64-row tiles compile in 0.32 s at 0.76x the default's speed, 128-row "
                      "in 0.42 s at 0.83x"},
}


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


def quick_first_call_options(d: int, consumer_warpgroups: int, packed: int) -> dict | None:
    """QUICK_FIRST_CALL's options (with QUICK_KV's tiles) for a plan of head dim `d` and `consumer_warpgroups`
    (packed: query heads a sequence stacks), or None where the first call waits for the tuned kernel: one consumer
    warpgroup (decoding shapes, whose kernels compile in about the quick one's time) and packed heads."""
    if consumer_warpgroups == 1 or packed > 1:
        return None
    kv = QUICK_KV.get(tuned(d)) if consumer_warpgroups == 2 else None
    return dict(QUICK_FIRST_CALL, **({"kv": kv} if kv else {}))


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
    """(key/value rows per tile, stages, late stages or None) of a kernel by default: CONFIGS and its kin (the
    2-warpgroup rows of CONFIGS and CONFIGS_SPLIT as tuned on the GPU at hand where tkpy.kernels.tune measured
    them)."""
    groups, family = consumer_warpgroups, tuned(d)
    if split_kv and groups == 2 and family > 128:
        return wide_kv(d), 2, 2
    d = family
    if split_kv:
        return (CONFIGS_SPLIT_3WG if groups == 3 else tuned_rows("attention.CONFIGS_SPLIT", CONFIGS_SPLIT))[d]
    if groups == 1:
        return (*CONFIGS_1WG.get(d, CONFIGS[d]), None)
    return (*(CONFIGS_3WG if groups == 3 else tuned_rows("attention.CONFIGS", CONFIGS))[d], None)


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


# The index math by divisors, or by C++'s division where the divisors' registers cost the kernel spills (_prepared)
DIVISION_CHOICES = ({}, dict(fast_division=False))


def clean_choices(d: int, consumer_warpgroups: int, options: dict, on_gpu: bool, pairs: bool) -> list[dict]:
    """The options _prepared tries in turn, the kernel of the first that compiles clean run (first_clean; none
    clean: the kernel as given): stale_shift at STALE_WHERE_IT_FITS's head dims; on the GPU (the interpreter divides
    as C++ either way) the index math by divisors, then by C++'s division (DIVISION_CHOICES); and with `pairs`
    (cluster pairs that cluster_for picked) single blocks after each, where the pair's kernel spills: D128's causal
    pairs spill 16 bytes under NVRTC 13.5, none under 13.0. Divisors go before pairs, the larger gain (EVIDENCE)."""
    choices = [dict(stale_shift=True)] if tuned(d) in STALE_WHERE_IT_FITS and consumer_warpgroups == 2 \
        and "stale_shift" not in options and options.get("pingpong", PINGPONG) is True else []
    if "fast_division" not in options and on_gpu:
        choices = [dict(choice, **division) for choice in choices + [{}] for division in DIVISION_CHOICES]
    if pairs and on_gpu:
        choices = [dict(choice, **single) for choice in choices or [{}] for single in ({}, dict(cluster=1))]
    return choices


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

