"""Lowering the IR to CUDA C++."""
from .abi import Slot, param_slots
from .emit import generate
from .prelude import PRELUDE
