"""A golden record of attention()'s choices (kernels/attention_policy.py): for a grid of shapes (batch, heads, key/value
heads, query rows, keys, head dim, causal) on 132 and 114 SMs, the kernel attention() runs (its AttentionConfig's
name), its split-K splits, and the kernels it tries first on the GPU, in order, the first that compiles clean
running (first_clean). A change of policy shows in review as a change of tests/golden/attention_policy.json;
regenerate it with `python tests/test_attention_policy.py --write` (and say why in the commit).

No GPU, nothing traced or compiled: meta tensors, the choices captured at first_clean."""
from __future__ import annotations

import os

import torch

import policy_record
from tkpy.kernels import attention_forward as att
from tkpy.kernels import attention_policy as policy

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "attention_policy.json")
SMS = (132, 114)
SHAPES = [  # (b, h, hkv, n, nk)
    (1, 16, 16, 4096, 4096), (1, 16, 16, 16384, 16384), (2, 16, 16, 1024, 1024), (8, 16, 16, 512, 512),
    (16, 16, 16, 256, 256), (2, 16, 16, 1000, 1000), (1, 16, 16, 700, 2817), (4, 16, 16, 64, 2048),
    (4, 16, 16, 128, 8192), (1, 32, 32, 128, 16384),                      # few tasks over many keys: split-K
    (2, 32, 8, 2048, 2048), (2, 32, 8, 4, 4096), (4, 32, 8, 1, 8192),     # GQA: long, speculative drafts, decoding
    (1, 8, 1, 1, 32768),                                                  # MQA decoding
]
DIMS = (64, 96, 128, 160, 256)
CAUSAL = (False, True, "bottom_right")


def cases():
    for sms in SMS:
        for b, h, hkv, n, nk in SHAPES:
            for d in DIMS:
                for causal in CAUSAL:
                    yield f"sms={sms} b={b} h={h} hkv={hkv} n={n} nk={nk} d={d} causal={causal}", \
                        (sms, b, h, hkv, n, nk, d, causal)


def choice(monkeypatch, sms, b, h, hkv, n, nk, d, causal) -> str:
    """`kernel splits=S tries=[...]`: the kernel attention() runs for the shape where none of the GPU's choices
    compiles clean (or the interpreter's: it tries none), its splits, and the GPU's choices in order."""
    seen = {}
    real_choices = policy.clean_choices

    def clean_choices(d, groups, options, on_gpu, pairs):
        seen["tries"] = real_choices(d, groups, options, True, pairs)     # the GPU's, off it
        return seen["tries"]

    def first_clean(config, args, choices):
        seen["config"], seen["args"] = config, args
        return None

    monkeypatch.setattr(att, "multiprocessors", lambda tensor: sms)
    monkeypatch.setattr(att, "clean_choices", clean_choices)
    monkeypatch.setattr(att, "first_clean", first_clean)
    q = torch.empty(b, h, n, d, dtype=torch.bfloat16, device="meta")
    k = torch.empty(b, hkv, nk, d, dtype=torch.bfloat16, device="meta")
    plan = att._ForwardPlan(None, q, k, causal, False)
    q_run = q.view(plan.run_shape) if plan.group > 1 else q
    att._prepared(q_run, k, k, q_run, None, causal, None, consumer_warpgroups=plan.groups, packed=plan.group)
    config = seen["config"]()
    splits = seen["args"][-1] if config.split_k else 1
    tries = [seen["config"](**c).name for c in seen["tries"]]
    return f"{config.name} splits={splits} tries={tries}"


def current(monkeypatch) -> dict:
    monkeypatch.setenv("TKPY_TUNED_TABLES", "0")      # the shipped tables' choices (on any GPU)
    return {name: choice(monkeypatch, *case) for name, case in cases()}


def test_policy_choices_match_the_golden_record(monkeypatch):
    policy_record.check(GOLDEN, current(monkeypatch))


def test_every_table_row_carries_its_evidence():
    policy_record.check_evidence(policy)


if __name__ == "__main__":
    policy_record.write_if_asked(GOLDEN, current)
