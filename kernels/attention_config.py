"""The config of kernels/attention_kernel.py's attention forward: AttentionConfig, a frozen dataclass of the options
the kernel takes, which checks them, resolves their defaults (attention_policy's tables) and derives the kernel's
name."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tkpy import bf16, fp16

from .attention_policy import (CONFIGS_3WG, CONSUMER_WARPGROUPS, OVERLAP, PINGPONG, Q_REGISTERS, SERIAL_ONE_GROUP,
                               STALE_SHIFT, default_tiles, pad_first_default, skips_default, tuned)

DTYPES = {torch.bfloat16: bf16, torch.float16: fp16}
HEAD_DIMS = range(16, 257, 16)      # the head dims the kernels take (wgmma K and the 16-column register tiles)
_DERIVED = dict(init=False, repr=False, compare=False)


@dataclass(frozen=True)
class AttentionConfig:
    """The options of the LCF attention kernel (attention_kernel._attention): head dim `d`, element type `dtype`
    (bf16/fp16), causal or not, with the
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
    "_qloadatstart".
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
    inference kernels); name "_nolse". Split-K needs it (combine_kernel weighs the splits by it).

    The fields are the options as given (None: the default), so that configs compare and cache as their arguments
    do; construction checks them (ValueError naming the option) and resolves the defaults into the derived fields
    below (not compared), which the kernel reads; `name` is the kernel's name, the options that are not the
    defaults spelled out."""

    d: int
    dtype: object = bf16
    causal: bool = False
    pingpong: bool = PINGPONG
    stages: int | None = None
    overlap: bool | None = None
    kv: int | None = None
    consumer_warpgroups: int = CONSUMER_WARPGROUPS
    split_kv: bool = False
    late_stages: int | None = None
    q_ahead: bool = False
    q_registers: bool | None = None
    q_preload: bool | None = None
    pad_first: bool | None = None
    cluster: int = 1
    split_k: bool = False
    packed: bool = False
    last_kv: int | None = None
    skip_masked: bool | None = None
    lse: bool = True
    stale_shift: bool | None = None
    next_q_in_step: bool | None = None
    fast_division: bool = True
    # derived: the options resolved (the tuned head dim whose settings d takes, the defaults, and the choices)
    family: int = field(**_DERIVED)
    turns: bool = field(**_DERIVED)                 # pingpong (never with one consumer warpgroup)
    overlapped: bool = field(**_DERIVED)            # overlap
    tiles: tuple = field(**_DERIVED)                # the default (kv, stages, late stages): default_tiles
    kv_rows: int = field(**_DERIVED)                # kv
    stage_count: int = field(**_DERIVED)            # stages
    late_stage_count: int | None = field(**_DERIVED)  # late_stages (split_kv only)
    stale_default: bool = field(**_DERIVED)
    stale: bool = field(**_DERIVED)                 # stale_shift
    skips_by_default: bool = field(**_DERIVED)
    skips: bool = field(**_DERIVED)                 # skip_masked
    q_default: bool = field(**_DERIVED)
    q_in_registers: bool = field(**_DERIVED)        # q_registers
    pads_first: bool = field(**_DERIVED)            # pad_first
    preload_default: bool = field(**_DERIVED)
    preloads_q: bool = field(**_DERIVED)            # q_preload
    in_step_default: bool = field(**_DERIVED)
    q_load_in_step: bool = field(**_DERIVED)        # next_q_in_step

    def _set(self, **derived) -> None:
        for key, value in derived.items():
            object.__setattr__(self, key, value)

    def __post_init__(self) -> None:
        d, groups, causal, packed, split_kv = self.d, self.consumer_warpgroups, self.causal, self.packed, self.split_kv
        if self.pingpong not in (True, False):
            raise ValueError(f"attention: pingpong must be True or False, got {self.pingpong!r}")
        if groups not in (1, 2, 3):
            raise ValueError(f"attention: consumer_warpgroups must be 1, 2 or 3, got {groups!r}")
        if d not in HEAD_DIMS:
            raise ValueError(f"attention: the head dim must be a multiple of 16 from 16 to 256, got {d}")
        family = tuned(d)                                   # (the tuned settings it takes)
        if groups == 3 and family not in CONFIGS_3WG:
            raise ValueError(f"attention: 3 consumer warpgroups take head dims up to {max(CONFIGS_3WG)} (their "
                             f"registers hold S, P and O of those only), got {d}")
        overlap = self.overlap
        if overlap is None:     # OVERLAP, but the serial schedule for SERIAL_ONE_GROUP's one-warpgroup kernels
            overlap = OVERLAP and not (groups == 1 and family in SERIAL_ONE_GROUP and not split_kv)
        if split_kv and not overlap:
            raise ValueError("attention: split_kv=True reads V_{k-1} at step k (the overlapped schedule); it needs "
                             "overlap=True")
        if self.cluster not in (1, 2):
            raise ValueError(f"attention: cluster must be 1 or 2, got {self.cluster!r}")
        if self.split_k and self.cluster > 1:
            raise ValueError("attention: split_k=True shares a task's keys between tasks that run apart; no clusters")
        if self.split_k and not self.lse:
            raise ValueError("attention: split_k=True needs lse=True (combine_kernel weighs the splits by their "
                             "log-sum-exps)")
        if self.late_stages is not None and not split_kv:
            raise ValueError("attention: late_stages (V's stages) is for split_kv=True")
        stale_default = family in STALE_SHIFT
        skips_by_default = skips_default(causal, groups, packed)
        skips = skips_by_default if self.skip_masked is None else self.skip_masked
        if skips and (packed or groups == 1):
            raise ValueError("attention: skip_masked=True is for kernels of 2 or 3 consumer warpgroups, not packed (a "
                             "warpgroup of padding rows, or causal one whose diagonal ends before its task's)")
        tiles = default_kv, default_stages, default_late = default_tiles(d, groups, split_kv)
        kv = self.kv or default_kv
        if kv % 16 or not 16 <= kv <= 256:
            raise ValueError(f"attention: kv (key/value rows per tile) must be a multiple of 16 from 16 to 256, got "
                             f"{kv}")
        last_kv = self.last_kv
        if last_kv is not None and (not isinstance(last_kv, int) or last_kv % 16 or not 16 <= last_kv < kv):
            raise ValueError(f"attention: last_kv (rows of a partial last key tile's MMAs) must be a multiple of 16 "
                             f"below kv ({kv}), got {last_kv!r}")
        q_default = groups <= 2 and family in Q_REGISTERS and kv <= 128 and overlap   # (longer tiles: spills)
        q_registers = q_default if self.q_registers is None else self.q_registers
        if packed and not causal:
            raise ValueError("attention: packed=True is for causal attention (non-causal packed rows need no kernel "
                             "of their own)")
        pad_first = pad_first_default(causal, packed) if self.pad_first is None else self.pad_first
        if pad_first and packed:
            raise ValueError("attention: pad_first=True does not go with packed=True (positions of rows before row 0)")
        if pad_first and not causal:
            raise ValueError("attention: pad_first=True is for causal attention (without a mask every row costs the "
                             "same)")
        preload_default = q_registers and not self.q_ahead
        # q_ahead: where every task has a first step (non-causal, no split-K or skips: otherwise tasks or warpgroups
        # of none), the next task's Q load is issued there, behind the step's S, its coordinates' integer divisions
        # off the way to that S (next_q_in_step).
        in_step_default = self.q_ahead and overlap and not causal and not self.split_k and not skips
        next_q_in_step = in_step_default if self.next_q_in_step is None else self.next_q_in_step
        if next_q_in_step and not in_step_default:
            raise ValueError("attention: next_q_in_step=True needs q_ahead and the overlapped schedule, and every task "
                             "a first step (non-causal, no split-K or skip_masked)")
        q_preload = preload_default if self.q_preload is None else self.q_preload
        if q_preload and (not q_registers or self.q_ahead):
            raise ValueError("attention: q_preload=True moves the next task's Q into registers at a task's finish; it "
                             "needs q_registers and not q_ahead (a second query tile)")
        if q_registers and not overlap:
            raise ValueError("attention: q_registers=True needs overlap=True: in the serial schedule NVRTC 13.0's "
                             "ptxas gives Q's registers to P inside the step loop (wrong outputs on the H200, "
                             "RESULTS.md run 96)")
        self._set(family=family, turns=self.pingpong if groups > 1 else False, overlapped=overlap, tiles=tiles,
                  kv_rows=kv, stage_count=self.stages or default_stages,
                  late_stage_count=(self.late_stages or default_late) if split_kv else None,
                  stale_default=stale_default, stale=stale_default if self.stale_shift is None else self.stale_shift,
                  skips_by_default=skips_by_default, skips=skips, q_default=q_default, q_in_registers=q_registers,
                  pads_first=pad_first, preload_default=preload_default, preloads_q=q_preload,
                  in_step_default=in_step_default, q_load_in_step=next_q_in_step)

    @property
    def name(self) -> str:
        """The kernel's name: attention_fwd_d<d>, then a suffix for each option that is not the default."""
        groups, (default_kv, default_stages, default_late) = self.consumer_warpgroups, self.tiles
        name = f"attention_fwd_d{self.d}" + ("" if self.dtype == bf16 else f"_{self.dtype.name}") \
            + ("" if groups == 2 else f"_{groups}wg") + ("_causal" if self.causal else "") \
            + ("" if self.turns or groups == 1 else "_lockstep") \
            + ("" if self.stage_count == default_stages else f"_{self.stage_count}stages") \
            + ("" if self.overlapped else "_serial") + ("" if self.kv_rows == default_kv else f"_kv{self.kv_rows}")
        if self.split_kv:
            name += "_splitkv" + ("" if self.late_stage_count == default_late else f"_{self.late_stage_count}late")
        return name + ("_qahead" if self.q_ahead else "") \
            + ("" if self.q_in_registers == self.q_default else "_qregs" if self.q_in_registers else "_qshared") \
            + ("" if self.preloads_q == self.preload_default else "_qpreload" if self.preloads_q else "_noqpreload") \
            + ("_padlast" if self.causal and not self.pads_first and not self.packed else "") \
            + (f"_cluster{self.cluster}" if self.cluster > 1 else "") + ("_splitk" if self.split_k else "") \
            + ("_packed" if self.packed else "") \
            + (f"_last{self.last_kv}" if self.last_kv else "") + ("" if self.fast_division else "_cdiv") \
            + ("" if self.skips == self.skips_by_default else "_skip" if self.skips else "_noskip") \
            + ("" if self.lse else "_nolse") \
            + ("" if self.stale == self.stale_default else "_stale" if self.stale else "_maxfirst") \
            + ("_qloadatstart" if self.in_step_default and not self.q_load_in_step else "")
