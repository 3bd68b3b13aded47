"""Lowering the IR to CUDA C++."""
from . import ops_hopper, ops_peer, ops_scalar, ops_warp, ops_warp_extra  # noqa: F401 - register the op emitters
from .abi import Slot, param_slots
from .emit import OP_EMITTERS, KernelCode, generate, kernel_code
from .prelude import PRELUDE
