"""examples/: each script runs to exit code 0 under TKPY_INTERPRET=1 (it checks itself against float64 torch on the
CPU interpreter), stays under 100 code lines (comments, docstrings and blank lines not counted), and its kernel
compiles to an sm_90a cubin with NVRTC without register spills, the GEMM's with wgmma (no GPU needed)."""
from __future__ import annotations

import ast
import importlib.util
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import torch

from tkpy.runtime import find_nvdisasm

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if p.stem != "harness")   # (what they share)
MAX_CODE_LINES = 100
NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
            tokenize.ENDMARKER}


def code_lines(source: str) -> int:
    """Lines holding a token that is not a comment, a docstring or layout (blank lines hold none)."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                                    str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def test_code_line_counter():
    source = '"""Doc\nstring."""\n# a comment\n\nx = 1  # counted\n\n\ndef f():\n    """Doc."""\n    return (\n        2)\n'
    assert code_lines(source) == 4


def test_there_are_examples():
    assert {p.stem for p in EXAMPLES} >= {"softmax", "layernorm", "gemm", "attention"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_short(path):
    n = code_lines(path.read_text())
    assert n < MAX_CODE_LINES, f"{path.name} has {n} code lines; an example stays under {MAX_CODE_LINES}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_and_checks_itself_on_the_interpreter(path):
    env = dict(os.environ, TKPY_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, f"{path.name} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert ": OK " in result.stdout, result.stdout


def load(name: str):
    """examples/<name>.py as a module (its main() is not run; it imports examples/harness.py from beside it)."""
    if str(ROOT / "examples") not in sys.path:
        sys.path.append(str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location(f"tkpy_example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_and_args(name: str):
    """The example's kernel and arguments at its GPU size (CPU tensors: compiling reads only their shapes)."""
    module, bf16 = load(name), torch.bfloat16
    if name == "softmax":
        x = torch.empty(524288, 128, dtype=bf16)
        return module.softmax_rows, (x, x, 128)
    if name == "layernorm":
        x, w = torch.empty(16384, 4096, dtype=bf16), torch.empty(4096, dtype=bf16)
        return module.layernorm_rows, (x, w, w, x, 1e-5)
    a = torch.empty(4096, 4096, dtype=bf16)
    return module.Matmul.kernel, (a, a, a)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "gemm"])
def test_example_compiles_for_sm90a_without_spills(name):
    kernel, args = kernel_and_args(name)
    compiled = kernel.trace(*args).lower().compile()
    assert compiled.cubin and not compiled.resources.spills, compiled.resources.summary()
    if name == "gemm" and find_nvdisasm():
        sass = compiled.sass()
        assert "HGMMA" in sass                       # wgmma, not the warp-level mma.sync (HMMA)
        # the tk.range loops as written (#pragma unroll 1): the consumer's loop one body, a stage's 4 wgmma
        # (NVRTC 13.5 otherwise unrolls it by 2 with a remainder, 12, and the producer's to 7 bodies)
        assert len(re.findall(r"\bHGMMA\.", sass)) == 4, re.findall(r"HGMMA\.\S+", sass)
