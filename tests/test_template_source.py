"""A block template's kernel source reads like the user's program: its line comments name the user's own lines
(their methods', the class's), the template's own statements marked as the template's; the task index computed
once a role from values made once for all roles; no two warp barriers in a row. CPU only (codegen)."""
from __future__ import annotations

import re

import torch

from tkpy.runtime.nvrtc import find_python_origin

from test_examples import load
from test_lcsf_template import piece_gemm
from test_trace_codegen import line_of

ORIGIN = re.compile(r"^\s*// (?:\[(\w+)\] )?([\w.-]+\.py):(\d+)  ", re.M)


def kernel_part(src: str) -> str:
    return src.split("// ---- end of prelude ----")[1]


def test_the_gemm_examples_comments_name_its_lines_and_mark_the_templates():
    example = load("gemm")
    user = type(example.Matmul.user)
    a, b, c = (torch.empty(shape, dtype=torch.bfloat16) for shape in ((256, 384), (384, 512), (256, 512)))
    body = kernel_part(example.Matmul.kernel.source(a, b, c))
    origins = ORIGIN.findall(body)
    assert {(template, file) for template, file, _ in origins} == {("", "gemm.py"), ("lcf", "pipeline.py"),
                                                                    ("lcf", "common.py"), ("lcf", "schedule.py")}
    lines = {int(line) for template, _, line in origins if not template}
    methods = {method: getattr(user, method) for method in ("tasks", "iters", "setup", "start", "finish")}
    assert {method.__code__.co_firstlineno for method in (methods["tasks"], methods["iters"])} <= lines
    for fn, text in ((user.load, "tk.tma.expect"), (user.load, "tk.tma.load_async(inp.b"), (methods["setup"], "st.acc"),
                     (methods["start"], "tk.zero"), (user.compute, "mma_AB"), (methods["finish"], "store")):
        assert line_of(fn, text) in lines
    # the user's tasks(g) and iters(g) make the grid's and the steps' constants
    assert re.search(rf"// gemm\.py:{methods['tasks'].__code__.co_firstlineno}  def tasks.*\n"
                     r"\s*const int row_tiles = M / 128;\n\s*const int col_tiles = N / 256;", body)
    # the kernel comes from the user's class, not from the template's code
    decorated = next(i for i, text in enumerate(open(example.__file__).read().splitlines(), 1) if "@tk.lcf" in text)
    assert f"// kernel matmul, traced from gemm.py:{decorated}:" in body


def test_a_marked_comment_still_maps_an_error_to_its_line():
    lines = ["x", "// [lcf] lcf.py:559  tk.wait(element(self.finished, s), 1 - phase)", "tk::wait(&finished[0], 1);"]
    assert find_python_origin(lines, 3) == ("lcf.py:559", "tk.wait(element(self.finished, s), 1 - phase)")


def test_the_task_index_is_computed_once_a_role_from_values_made_once():
    """The grouped order's tasks per group is made once before the roles branch; each role (producer, storer,
    consumers) computes its task's tile from its index once, in named steps."""
    a, b, c = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16), \
        torch.empty(256, 64)
    body = kernel_part(piece_gemm(2, 2, 2, 4).kernel.source(a, b, c))
    assert body.count("const int group_tasks = 8 * col_tiles;") == 1
    assert body.index("const int group_tasks") < body.index("if (warpid / 4 == 2) {")       # before the roles
    assert body.count("min(row_tiles - group_row") == 3 and "(8 * col_tiles)" not in body  # a role each
    for name in ("group_row", "group_rows", "in_group", "task_row", "task_col"):
        assert len(re.findall(rf"const int {name}(_\d+)? = ", body)) == 3
    assert re.search(r"const int task_row = group_row \+ in_group % group_rows;\n\s*"
                     r"const int task_col = in_group / group_rows;", body)


def test_no_two_warp_barriers_in_a_row():
    """A store wait's barrier followed by an arrival's is one barrier (comments between them do not count)."""
    a, b, c = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16), \
        torch.empty(256, 64)
    body = kernel_part(piece_gemm(2, 2, 2, 4).kernel.source(a, b, c))
    statements = [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("//")]
    assert statements.count("__syncwarp();") > 3
    assert not any(x == y == "__syncwarp();" for x, y in zip(statements, statements[1:]))
    assert re.search(r"store_async_read_wait<1>\(\);\n\s*__syncwarp\(\);\n\s*// \[lcsf\] lcsf\.py:\d+  tk\.arrive.*\n"
                     r"\s*if \(laneid == 0\) tk::arrive", body)
