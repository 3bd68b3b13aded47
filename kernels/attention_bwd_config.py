"""The config of attention's backward kernels (kernels/attention_bwd_kernel.py, attention_bwd_dq_kernel.py):
AttentionBwdConfig, a frozen dataclass of their options, which checks them, resolves their defaults
(attention_bwd_policy's tables) and derives the kernels' names."""
from __future__ import annotations

from dataclasses import dataclass, field

from tkpy import bf16, fp16

from .attention_bwd_policy import (DQ_SNAKE, DQ_TILES, MAX_DIM, STEP_ROWS, WIDE_STEP_DIMS, atomic_dq,
                                   dq_storer_fits, dq_storer_for, early_p_for, main_stages_for, snake_for, splits_for,
                                   task_group, tuned)

_DERIVED = dict(init=False, repr=False, compare=False)


@dataclass(frozen=True)
class AttentionBwdConfig:
    """The options of attention's backward: head dim `d` (a multiple of 32 up to 256: attention_backward pads the
    others), element type `dtype` (bf16 or fp16), causal or not (the kernels take an `offset`: query i sees key j
    when j <= i + offset), and deterministic=True: dQ from the dQ pass (attention_bwd_dq_kernel: a task per query
    tile, its key tiles in order) instead of the main kernel's reduce-adds, whose order varies from run to run;
    its gradients are then bit-identical from run to run. Past D128 the dQ pass runs either way (dq_pass).
    `stages`: the main kernel's ring of (Q, dO) tiles (default MAIN_STAGES); `dq_kv` and `dq_stages`: the dQ pass's
    key/value rows per tile (a multiple of 16 up to 256) and its ring's stages (default DQ_TILES); `dq_storer`: the
    stages (1..4) of a step-output ring through which the main kernel's dQ pieces go to a storer warp of the producer
    warpgroup, which issues their reduce-adds (0: the first consumer warpgroup issues them itself from its staging
    tiles; default DQ_STORER); `q_rows`: the main kernel's query rows a step, 64 or (D64) 128, each warpgroup then
    computing dQ's 64 rows of its own half of the step's queries through the storer (default STEP_ROWS);
    `early_p` (at 64 query rows a step): P^T computed and dV's products issued while dP^T's run, as
    FlashAttention-3 orders them (default EARLY_P); `group` (1..16): the main kernel's task order's rows of key tiles
    (tk.templates.Grouped's group; default task_group) and `snake`: its persistent blocks' every other round of
    tasks in reverse (Grouped's snake; default snake_for(causal)); `dq_snake`: the dQ pass's so (default DQ_SNAKE).

    The fields are the options as given (None: the default), so that configs compare and cache as their arguments do;
    construction checks them (ValueError naming the option) and resolves them into the derived fields."""

    d: int
    dtype: object = bf16
    causal: bool = False
    deterministic: bool = False
    stages: int | None = None
    dq_kv: int | None = None
    dq_stages: int | None = None
    dq_storer: int | None = None
    q_rows: int | None = None
    early_p: bool | None = None
    group: int | None = None
    snake: bool | None = None
    dq_snake: bool | None = None
    # derived
    family: int = field(**_DERIVED)             # the tuned head dim whose table rows d takes
    dq_pass: bool = field(**_DERIVED)           # dQ from the dQ pass, not the main kernel
    splits: int = field(**_DERIVED)             # the main kernel's tasks per key tile (column pieces of dK, dV)
    stage_count: int = field(**_DERIVED)
    dq_kv_rows: int = field(**_DERIVED)
    dq_stage_count: int = field(**_DERIVED)
    storer_stages: int = field(**_DERIVED)       # the dQ storer's stages, 0 for none
    step_rows: int = field(**_DERIVED)           # the main kernel's query rows a step
    p_first: bool = field(**_DERIVED)            # early_p's: P^T while dP^T's products run
    task_rows: int = field(**_DERIVED)           # group's: the main kernel's task order's rows of key tiles
    snake_order: bool = field(**_DERIVED)        # snake's
    dq_snake_order: bool = field(**_DERIVED)     # dq_snake's

    def __post_init__(self) -> None:
        d = self.d
        if not isinstance(d, int) or d % 32 or not 32 <= d <= MAX_DIM:
            raise ValueError(f"attention backward: the kernels take head dims in multiples of 32 from 32 to {MAX_DIM} "
                             f"(two column pieces of a multiple of 16; attention_backward pads the others), got {d!r}")
        if self.dtype not in (bf16, fp16):
            raise ValueError(f"attention backward: dtype must be bf16 or fp16, got {self.dtype!r}")
        for option in ("causal", "deterministic"):
            if getattr(self, option) not in (True, False):
                raise ValueError(f"attention backward: {option} must be True or False, got {getattr(self, option)!r}")
        family = tuned(d)
        step_rows = self.q_rows or STEP_ROWS[family].value[0]
        if step_rows not in (64, 128) or step_rows == 128 and family not in WIDE_STEP_DIMS:
            raise ValueError(f"attention backward: q_rows (query rows a step of the main kernel) is 64, or 128 at "
                             f"head dims up to {max(WIDE_STEP_DIMS)} (the registers), got {self.q_rows!r} at head "
                             f"dim {d}")
        wide = step_rows == 128
        stages = self.stages or main_stages_for(family, step_rows)
        default_kv, default_dq_stages = DQ_TILES[family].value
        dq_kv, dq_stages = self.dq_kv or default_kv, self.dq_stages or default_dq_stages
        for option, value in (("stages", stages), ("dq_stages", dq_stages)):
            if not isinstance(value, int) or not 1 <= value <= 8:
                raise ValueError(f"attention backward: {option} must be 1..8, got {value!r}")
        early_p = early_p_for(family, step_rows, self.causal) if self.early_p is None else self.early_p
        if early_p not in (True, False) or early_p and wide:
            raise ValueError(f"attention backward: early_p (P^T while dP^T's products run) is True or False, True "
                             f"at 64 query rows a step; got {self.early_p!r} with q_rows={step_rows}")
        group = task_group(self.causal) if self.group is None else self.group
        if not isinstance(group, int) or isinstance(group, bool) or not 1 <= group <= 16:
            raise ValueError(f"attention backward: group (the task order's rows of key tiles) must be 1..16, got "
                             f"{self.group!r}")
        snake = snake_for(self.causal) if self.snake is None else self.snake
        dq_snake = DQ_SNAKE.value[0] if self.dq_snake is None else self.dq_snake
        for option, value in (("snake", snake), ("dq_snake", dq_snake)):
            if value not in (True, False):
                raise ValueError(f"attention backward: {option} (every other round of tasks in reverse) is True or "
                                 f"False, got {getattr(self, option)!r}")
        dq_pass = not atomic_dq(d, self.deterministic)
        storer = dq_storer_for(family, dq_pass) if self.dq_storer is None else self.dq_storer
        if storer and dq_pass:
            raise ValueError("attention backward: dq_storer is the main kernel's dQ (head dims up to 128, not "
                             "deterministic); here the dQ pass computes dQ")
        fits = dq_storer_fits(family, step_rows)
        if wide and not dq_pass and not storer:
            raise ValueError("attention backward: q_rows=128 hands dQ to the storer warp (each warpgroup its 64 "
                             "rows): give dq_storer=1")
        if not isinstance(storer, int) or isinstance(storer, bool) or not 0 <= storer <= fits:
            raise ValueError(f"attention backward: dq_storer (the dQ storer's stages, 0 for none) must be 0..{fits} "
                             f"at head dim {d} (what shared memory holds beside the main kernel's tiles), got "
                             f"{storer!r}")
        if not isinstance(dq_kv, int) or dq_kv % 16 or not 16 <= dq_kv <= 256:
            raise ValueError(f"attention backward: dq_kv (key rows per tile of the dQ pass) must be a multiple of 16 "
                             f"from 16 to 256, got {dq_kv!r}")
        for key, value in dict(family=family, dq_pass=dq_pass, splits=splits_for(d),
                               stage_count=stages, dq_kv_rows=dq_kv, dq_stage_count=dq_stages,
                               storer_stages=storer, step_rows=step_rows, p_first=bool(early_p),
                               task_rows=group, snake_order=bool(snake), dq_snake_order=bool(dq_snake)).items():
            object.__setattr__(self, key, value)

    def _suffix(self) -> str:
        return ("" if self.dtype == bf16 else f"_{self.dtype.name}") + ("_causal" if self.causal else "")

    @property
    def name(self) -> str:
        """The main kernel's name: attention_bwd_d<d>, the dtype and causality, "_nodq" where the dQ pass computes dQ
        at a head dim where the main kernel would, the stages, storer stages, query rows a step, early_p, the task
        order's group and snake where not the default."""
        default_stages = main_stages_for(self.family, self.step_rows)
        default_storer = dq_storer_for(self.family, self.dq_pass)
        return f"attention_bwd_d{self.d}" + self._suffix() \
            + ("_nodq" if self.dq_pass and self.splits == 1 else "") \
            + ("" if self.stage_count == default_stages else f"_{self.stage_count}stages") \
            + ("" if self.storer_stages == default_storer else f"_storer{self.storer_stages}") \
            + ("" if self.step_rows == STEP_ROWS[self.family].value[0] else f"_q{self.step_rows}") \
            + _flag("earlyp", self.p_first, early_p_for(self.family, self.step_rows, self.causal)) \
            + ("" if self.task_rows == task_group(self.causal) else f"_g{self.task_rows}") \
            + _flag("snake", self.snake_order, snake_for(self.causal))

    @property
    def dq_name(self) -> str:
        """The dQ pass's name: attention_bwd_dq_d<d>, the dtype and causality, its tiles where not the default."""
        kv, stages = DQ_TILES[self.family].value
        return f"attention_bwd_dq_d{self.d}" + self._suffix() \
            + ("" if self.dq_kv_rows == kv else f"_kv{self.dq_kv_rows}") \
            + ("" if self.dq_stage_count == stages else f"_{self.dq_stage_count}stages") \
            + _flag("snake", self.dq_snake_order, DQ_SNAKE.value[0])


def _flag(name: str, value: bool, default: bool) -> str:
    """A name's tag for a boolean option away from its default: _<name> set, _no<name> unset."""
    return "" if value == default else f"_{'' if value else 'no'}{name}"
