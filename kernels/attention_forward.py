"""attention(): FlashAttention-style forward attention on Hopper, the launch behind the torch operator
(kernels/attention_op.py): argument checks, GQA head packing, the plan of a signature of inputs and the launch.

The kernel is kernels/attention_kernel.py's (its module docstring says how it runs); its options are
attention_config.AttentionConfig's, and the options attention() runs for a shape attention_policy's choice;
split-K's merge is attention_combine's.
"""
from __future__ import annotations

import functools
import math

import torch

import tkpy as tk
from tkpy.templates import multiprocessors

from .attention_combine import _combine
from .attention_config import DTYPES, HEAD_DIMS, AttentionConfig
from .attention_kernel import LOG2E, _attention
from .attention_policy import (FAST_DIVISION_TASKS, Q_ROWS, clean_choices, cluster_for, consumer_warpgroups_for,
                               default_tiles, few_keys_options, last_kv_for, lse_rows, q_rows,
                               quick_first_call_options, split_kv_for, splits_for, stream_tiles, whole_clusters)
from .op_support import check_device
from .tensor_layout import ALIGN, cdiv, tma_layout


CAUSAL = {False: None, True: "top_left", "top_left": "top_left", "upper_left": "top_left",
          "bottom_right": "bottom_right", "lower_right": "bottom_right"}


def causal_variant(causal) -> str | None:
    """CAUSAL's mask for attention()'s `causal` argument (None: not causal), or a clear error."""
    if not isinstance(causal, (bool, str)) or causal not in CAUSAL:
        raise ValueError(f"causal must be False, True (top-left, as torch), 'top_left' or 'bottom_right'; "
                         f"got {causal!r}")
    return CAUSAL[causal]



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


def _usable(x: torch.Tensor, layout_ok: bool | None = None) -> torch.Tensor:
    """x itself when the kernel can read it in place (tma_ready: e.g. a (B, N, H, D) tensor transposed to
    (B, H, N, D)); otherwise (also where it repeats a dim, e.g. k.expand(batch, ...)) a contiguous copy.
    `layout_ok`: tma_layout(x), where a plan knows it for x's strides (it costs about 1 us a tensor)."""
    return x if (tma_layout(x) if layout_ok is None else layout_ok) and x.data_ptr() % ALIGN == 0 else x.contiguous()


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
        plan = _FORWARD_PLANS[signature] = _ForwardPlan(signature, q, k, causal, return_lse)
    return plan(q, k, v, scale)


_FORWARD_PLANS: dict = {}


class _ForwardPlan:
    """forward for one signature of inputs (shapes, strides, dtypes, device, causal, the scale's sign, return_lse):
    the checks passed and the choices made (head packing, consumer warpgroups) once, from shapes alone; the kernel
    _prepared picks on the first call (_Chosen), or on a cold cache a quick kernel until the picked one has compiled
    in the background (QUICK_FIRST_CALL); a call then allocates, checks pointers and launches."""

    def __init__(self, signature, q, k, causal, return_lse):
        (b, h, n, d), hkv = q.shape, k.shape[1]
        self.signature = signature
        self.group = packed_heads(q, hkv)
        h_run, n_run = (hkv, self.group * n) if self.group > 1 else (h, n)
        self.groups = consumer_warpgroups_for(b, h_run, n_run, d, multiprocessors(q),
                                              causal_variant(causal) is not None and self.group == 1)
        self.causal, self.return_lse = causal, return_lse
        self.run_shape = (b, h_run, n_run, d)
        self.default_scale = 1.0 / math.sqrt(d)
        self.quick_options = quick_first_call_options(d, self.groups, self.group)
        self.chosen = self.quick = None     # the kernel _prepared picks, once compiled; the quick one meanwhile

    def __call__(self, q, k, v, scale):
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        q_run, o_run = (q.view(self.run_shape), o.view(self.run_shape)) if self.group > 1 else (q, o)
        lse = torch.empty(*self.run_shape[:2], lse_rows(self.run_shape[2], self.groups), dtype=torch.float32,
                          device=q.device) if self.return_lse else None
        if o.numel():
            self._launch(q_run, k, v, o_run, lse, scale)
        return (o, lse[..., :self.run_shape[2]].reshape(o.shape[:3]).contiguous()) if self.return_lse else o

    def _launch(self, q, k, v, o, lse, scale):
        chosen = self.chosen
        if chosen is None:
            quick = None if self.quick_options is None else lambda: self._quick(q, k, v, o, lse, scale)
            chosen, final = _FIRST_CALLS.pick(self.signature, lambda: self._choose(q, k, v, o, lse, scale, {}), quick)
            if final:
                self.chosen, self.quick = chosen, None
        chosen.launch(q, k, v, o, lse, self.default_scale if scale is None else float(scale))

    def _quick(self, q, k, v, o, lse, scale) -> "_Chosen":
        if self.quick is None:
            self.quick = self._choose(q, k, v, o, lse, scale, self.quick_options)
        return self.quick

    def _choose(self, q, k, v, o, lse, scale, options: dict) -> "_Chosen":
        """_prepared's kernel for these inputs (with `options`), compiled (it reads tensors: first_clean compiles on
        them)."""
        template, args = _prepared(q, k, v, o, lse, self.causal, scale, consumer_warpgroups=self.groups,
                                   packed=self.group, **options)
        template.kernel.compile(*args)
        return _Chosen(template, args, q, k, v, lse)


_FIRST_CALLS = tk.QuickFirstCall("attention")


class _Chosen:
    """A kernel _prepared picked for a plan and what its launches reuse: the grid (from shapes only, which the
    plan's signature fixes), the scalar arguments after the scale, the workspaces' shapes under split-K, and which
    inputs TMA reads in place."""

    def __init__(self, template, args, q, k, v, lse):
        outputs = 1 + (lse is not None) if not template.scheduler.splits_k else 2
        self.scalars = tuple(args[3 + outputs + 1:])
        self.workspaces = [tuple(w.shape) for w in args[3:3 + outputs]] if template.scheduler.splits_k else None
        self.layouts = tma_layout(q), tma_layout(k), tma_layout(v)
        self.grid = template.grid(*args)
        self.kernel = template.kernel

    def launch(self, q, k, v, o, lse, scale: float) -> None:
        keys, scale = _positive_scale(k, scale)
        if self.workspaces is not None:
            outputs = [torch.empty(shape, dtype=torch.float32, device=q.device) for shape in self.workspaces]
        else:
            outputs = (o,) if lse is None else (o, lse)
        q_ok, k_ok, v_ok = self.layouts
        args = (_usable(q, q_ok), _usable(keys, k_ok and keys is k), _usable(v, v_ok), *outputs, scale * LOG2E,
                *self.scalars)
        self.kernel[self.grid](*args)        # (kernel[grid] is the fast launcher once the first launch built it)
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


def _prepared(q, k, v, o, lse, causal, scale, consumer_warpgroups: int | None = None, split_kv: bool | None = None,
              cluster: int | None = None, splits: int | None = None, packed: int = 1, **options):
    """_launch's kernel template and its arguments (None when the output is empty); `options` go to AttentionConfig
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
    config = functools.partial(AttentionConfig, d, DTYPES[q.dtype], variant is not None,
                               consumer_warpgroups=consumer_warpgroups, split_kv=split_kv, cluster=cluster,
                               split_k=splits > 1, lse=lse is not None or splits > 1,
                               **({"packed": True} if packed > 1 and variant is not None else {}), **options)
    on_gpu = q.is_cuda or q.is_meta             # (meta tensors: planning a GPU's kernels, python -m tkpy.warmup)
    choices = clean_choices(d, consumer_warpgroups, options, on_gpu, picked_pairs and cluster > 1)
    return first_clean(config, args, choices) or _attention(config()), args


def first_clean(config, args, choices) -> object | None:
    """The kernel template of config(**choice) (config: a partial AttentionConfig) for the first of `choices` that
    compiles clean (_compiles_clean), or None; a new process takes an earlier one's verdict, checked on that kernel
    alone (tk.tune.first_clean: on a warm cache the others are not traced)."""
    configs = [config(**choice) for choice in choices]
    return tk.tune.first_clean([c.name for c in configs], lambda i: _attention(configs[i]), args, _compiles_clean)


_CLEAN: dict[str, bool] = {}

def _compiles_clean(template, args) -> bool:
    """Whether the template's kernel compiles without spilling registers and with its wgmma asynchronous
    (tk.tune.compiles_clean: NVRTC, no GPU; once per kernel and process, its source being the same for any sizes)."""
    name = template.kernel.name
    if name not in _CLEAN:
        _CLEAN[name] = tk.tune.compiles_clean(template, args)
    return _CLEAN[name]


def _positive_scale(k: torch.Tensor, scale: float) -> tuple[torch.Tensor, float]:
    """Keys and a positive scale giving the same scores q k^T * scale: the kernel takes the running max of
    the raw scores, which is the max of the scaled ones only for a positive scale. A negative scale: -k
    (negation is exact) and |scale|; zero: every score is 0, as q zeros^T * 1. (NaN passes through.)"""
    if scale < 0:
        return -k, -scale
    if scale == 0:
        return torch.zeros_like(k), 1.0
    return k, scale
