"""tkpy.kernels: kernels written in tkpy, each a torch operator (torch.ops.tkpy.<name>) with a torch-facing function.

    from tkpy.kernels import (attention, cross_entropy, geglu, layer_norm, matmul, matmul_fp8, rms_norm, rotary,
                              softmax, scaled_dot_product_attention)

The repository keeps them in its top-level kernels/ folder; installed, they are the package tkpy.kernels (and in a
checkout tkpy maps that name to the folder): import them by that name only.
"""
if __name__ != "tkpy.kernels":
    raise ImportError(f"the kernels folder is the package tkpy.kernels: import tkpy.kernels, not {__name__}")

from .attention_op import attention, scaled_dot_product_attention  # noqa: E402
from .comm_ops import all_gather_matmul, all_reduce, matmul_reduce_scatter  # noqa: E402
from .cross_entropy_op import cross_entropy  # noqa: E402
from .glu import geglu, swiglu  # noqa: E402
from .matmul_fp8_op import matmul_fp8  # noqa: E402
from .matmul_op import matmul  # noqa: E402
from .norms import layer_norm, rms_norm  # noqa: E402
from .rotary_op import rotary  # noqa: E402
from .softmax_op import softmax  # noqa: E402

__all__ = ["all_gather_matmul", "all_reduce", "attention", "cross_entropy", "geglu", "layer_norm", "matmul", "matmul_fp8",
           "matmul_reduce_scatter", "rms_norm", "rotary", "scaled_dot_product_attention", "softmax", "swiglu", "tune"]


def __getattr__(name: str):
    """`tkpy.kernels.tune` (kernels/retune.py's), imported on first use: `python -m tkpy.kernels.retune` runs that
    module as a script, which must not have been imported by the package before."""
    if name == "tune":
        from .retune import tune
        return tune
    raise AttributeError(f"module 'tkpy.kernels' has no attribute {name!r}")
