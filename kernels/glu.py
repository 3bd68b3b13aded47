"""SwiGLU and GeGLU as torch operators (`torch.ops.tkpy.glu`, `glu_packed` and their `_backward`s) with autograd:
`swiglu(gate, up)` = silu(gate) * up, `geglu(gate, up, approximate="none")` = gelu(gate) * up, or of one tensor whose
last dim holds [gate | up] (`swiglu(x)`, as LLM MLPs store their fused projection), whose gradient is written as
one tensor too. bf16/fp16 in and out, fp32 math, one pass over memory each way (kernels/glu_kernel.py)."""
from __future__ import annotations

import torch

from . import glu_kernel as body
from .glu_policy import config_for
from .op_support import check_device, define, direct_call_ok, resident_blocks
from .row_split import INTERPRETER_SMS, piece_grid
from .tensor_layout import row_view

DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
APPROXIMATE = {"none": "gelu", "tanh": "gelu_tanh"}
NAMES = {"silu": "swiglu", "gelu": "geglu", "gelu_tanh": "geglu"}


def swiglu(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """silu(gate) * up (silu(x) = x sigmoid(x)), elementwise, gate and up of one shape and dtype (bf16 or fp16, the
    last dim a multiple of 8); or, with one tensor x of last dim 2d, silu(x[..., :d]) * x[..., d:]. fp32 math, the
    result rounded once. CUDA tensors, or CPU tensors under TKPY_INTERPRET=1; differentiable (no double backward);
    torch.compile sees torch.ops.tkpy.glu / glu_packed."""
    return _glu("silu", gate, up)


def geglu(gate: torch.Tensor, up: torch.Tensor | None = None, approximate: str = "none") -> torch.Tensor:
    """gelu(gate) * up, as swiglu (one tensor [gate | up] too); `approximate` "none" (the erf gelu) or "tanh", as
    torch.nn.functional.gelu's."""
    if approximate not in APPROXIMATE:
        raise ValueError(f"geglu: approximate must be 'none' or 'tanh' (as torch.nn.functional.gelu), got "
                         f"{approximate!r}")
    return _glu(APPROXIMATE[approximate], gate, up)


def _glu(activation: str, gate, up):
    if up is None:
        halves(activation, gate)
        if direct_call_ok((gate,)):
            return _packed(gate, activation)
        return glu_packed_op(gate, activation)
    checked(activation, gate, up)
    if direct_call_ok((gate, up)):
        return _separate(gate, up, activation)
    return glu_op(gate, up, activation)


# -- checks and launches -------------------------------------------------------------------------------------------

def checked(activation: str, gate: torch.Tensor, up: torch.Tensor, what: str = "up") -> int:
    """The row width, or the ValueError the call raises before any GPU work (the fake implementations check too)."""
    name = NAMES.get(activation)
    if name is None:
        raise ValueError(f"glu: activation must be one of {tuple(NAMES)}, got {activation!r}")
    check_device(name, gate)
    if gate.dtype not in DTYPES:
        raise ValueError(f"{name} takes bf16 or fp16 tensors (fp32 math), got {gate.dtype}")
    if up.shape != gate.shape or up.dtype != gate.dtype or up.device != gate.device:
        raise ValueError(f"{name}: {what} must have gate's shape, dtype and device; got {tuple(up.shape)} "
                         f"{up.dtype} on {up.device} against {tuple(gate.shape)} {gate.dtype} on {gate.device}")
    if gate.dim() == 0 or gate.shape[-1] % 8:
        raise ValueError(f"{name}: the last dim must be a multiple of 8 (16-byte rows), got shape {tuple(gate.shape)}")
    return gate.shape[-1]


def halves(activation: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up): the halves of x's last dim, checked."""
    name = NAMES.get(activation, "glu")
    if x.dim() == 0 or x.shape[-1] % 16:
        raise ValueError(f"{name} of one tensor [gate | up] takes a last dim of 2d, d a multiple of 8, got shape "
                         f"{tuple(x.shape)}")
    d = x.shape[-1] // 2
    gate, up = x[..., :d], x[..., d:]
    checked(activation, gate, up)
    return gate, up


def forward(activation: str, gate, up, out, options: dict | None = None) -> torch.Tensor:
    """out = act(gate) * up (out: a tensor of gate's shape, written in place). `options`: GluConfig fields."""
    width = gate.shape[-1]
    rows = gate.numel() // width
    if rows:
        c = config_for(activation, "forward", width, DTYPES[gate.dtype], **(options or {}))
        args = (row_view(gate, width), row_view(up, width), out.view(-1, width))
        _launch(body.forward_kernel(c), c, rows, args)
    return out


def backward(activation: str, dout, gate, up, dgate, dup, options: dict | None = None) -> None:
    """dgate, dup (of gate's shape, written in place; views of one tensor for the packed form)."""
    width = gate.shape[-1]
    checked(activation, gate, dout, "grad_output")
    rows = gate.numel() // width
    if rows:
        c = config_for(activation, "backward", width, DTYPES[gate.dtype], **(options or {}))
        args = (row_view(dout, width), row_view(gate, width), row_view(up, width), dgate.view(-1, width),
                dup.view(-1, width))
        _launch(body.backward_kernel(c), c, rows, args)


def _launch(kernel, c, rows: int, args) -> None:
    kernel[(piece_grid(c, rows, resident_blocks(kernel, c, args, INTERPRETER_SMS)),)](*args)


# -- the operators ----------------------------------------------------------------------------------------------

def _separate(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    checked(activation, gate, up)
    return forward(activation, gate, up, gate.new_empty(gate.shape))


def _packed(x: torch.Tensor, activation: str) -> torch.Tensor:
    gate, up = halves(activation, x)
    return forward(activation, gate, up, gate.new_empty(gate.shape))


def _separate_backward(grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
                       activation: str) -> tuple[torch.Tensor, torch.Tensor]:
    checked(activation, gate, up)
    dgate, dup = gate.new_empty(gate.shape), gate.new_empty(gate.shape)
    backward(activation, grad_out, gate, up, dgate, dup)
    return dgate, dup


def _packed_backward(grad_out: torch.Tensor, x: torch.Tensor, activation: str) -> torch.Tensor:
    gate, up = halves(activation, x)
    dx = x.new_empty(x.shape)
    d = gate.shape[-1]
    backward(activation, grad_out, gate, up, dx[..., :d], dx[..., d:])
    return dx


def _separate_fake(gate, up, activation):
    checked(activation, gate, up)
    return gate.new_empty(gate.shape)


def _packed_fake(x, activation):
    return halves(activation, x)[0].new_empty(x.shape[:-1] + (x.shape[-1] // 2,))


def _separate_backward_fake(grad_out, gate, up, activation):
    checked(activation, gate, up)
    checked(activation, gate, grad_out, "grad_output")
    return gate.new_empty(gate.shape), gate.new_empty(gate.shape)


def _packed_backward_fake(grad_out, x, activation):
    checked(activation, halves(activation, x)[0], grad_out, "grad_output")
    return x.new_empty(x.shape)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:-1])
    ctx.activation = inputs[-1]


def _separate_gradient(ctx, grad):
    gate, up = ctx.saved_tensors
    return (*glu_backward_op(grad.contiguous(), gate, up, ctx.activation), None)


def _packed_gradient(ctx, grad):
    x, = ctx.saved_tensors
    return glu_packed_backward_op(grad.contiguous(), x, ctx.activation), None


NO_DOUBLE = "double backward of swiglu / geglu is not implemented"
glu_backward_op = define("glu_backward", _separate_backward, _separate_backward_fake, differentiable=NO_DOUBLE)
glu_packed_backward_op = define("glu_packed_backward", _packed_backward, _packed_backward_fake,
                                differentiable=NO_DOUBLE)
glu_op = define("glu", _separate, _separate_fake, backward=_separate_gradient, setup_context=_setup)
glu_packed_op = define("glu_packed", _packed, _packed_fake, backward=_packed_gradient, setup_context=_setup)
