"""tkpy's intermediate representation: typed tile variables, ops and structured control flow."""
from .core import Decl, Let, For, GlobalVar, If, KernelIR, Loc, Op, ScalarParam, SharedRef, Var, walk
from .expr import Expr, Sym, Const, cdiv, render
from .printer import print_ir
from .passes import run_all, verify, plan_shared, register_estimate
