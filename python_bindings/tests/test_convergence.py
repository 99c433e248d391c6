# SPDX-License-Identifier: Apache-2.0
"""Convergence with the optimizers people use: 4 DDP ranks over gloo train, with the same
budget uncompressed and through the gradcodec hook with every codec at its defaults and
the hook's defaults,

- a small CNN on scikit-learn's digits with momentum SGD and weight decay
  (examples/ddp_digits.py): every codec within 1.5 accuracy points of uncompressed;
- a 2-layer character transformer on Debian's licence texts with AdamW
  (examples/ddp_chars.py): every codec within 3 % of the uncompressed held-out loss
  (MXFP8 within 0.5 %);

while sending fewer bytes than DDP's float32 allreduce, and no run going non-finite."""

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
# The block-scaled codecs run as issue 28 asks: MXFP8 at its defaults, MXFP4 with rotation
# and stochastic rounding (the recipe of "Training LLMs with MXFP4").
MXFP4_RECIPE = "mxfp4:rotate=1,rounding=stochastic"
CODECS = ["topk", "dgc", "randomk", "threshold", "qsgd", "terngrad", "minmax", "onebit",
          "sign", "fp16", "bf16", "powersgd", "mxfp8", MXFP4_RECIPE]
#: Held-out loss allowed over uncompressed (default 3 %): MXFP8 is held to 0.5 %.
LOSS_WITHIN = {"mxfp8": 1.005}

def load_example(name):
    # On sys.path so that the spawned ranks can import the task classes by name.
    sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def check(task_name, results, base_ok, within):
    compare = sys.modules["ddp_compare"]
    assert set(results) == {compare.BASELINE, *CODECS}
    base = results[compare.BASELINE]
    assert base["failure"] is None and base_ok(base), base
    failures = []
    for codec in CODECS:
        r = results[codec]
        assert r["failure"] is None, f"{task_name} {codec}: {r['failure']}"
        # Warm-up or dense fallbacks may not eat the saving: the whole run saves at least
        # half of what a typical (median) step saves.
        run_ratio = r["dense_bytes_per_step"] / r["bytes_per_step"]
        steady_ratio = r["dense_bytes_per_step"] / r["steady_bytes_per_step"]
        assert run_ratio >= 0.5 * steady_ratio, (task_name, codec, run_ratio, steady_ratio)
        assert r["bytes_per_step"] < base["bytes_per_step"], (task_name, codec)
        if not within(r, base, codec):
            failures.append(f"{codec}: {r['quality']} against {base['quality']}")
    assert not failures, f"{task_name}: {failures}"


def test_momentum_sgd_cnn_on_digits():
    digits = load_example("ddp_digits")
    results = digits.ddp_compare.compare(digits.Digits(), CODECS, world=4)
    check("digits", results, lambda b: b["quality"]["accuracy"] >= 0.97,
          lambda r, b, _: r["quality"]["accuracy"] >= b["quality"]["accuracy"] - 0.015)


def test_adamw_transformer_on_text():
    chars = load_example("ddp_chars")
    results = chars.ddp_compare.compare(chars.Chars(), CODECS, world=4)
    loss = "held-out loss"
    # Uncompressed training must have learned (a uniform guess over ~100 symbols is 4.6).
    check("chars", results, lambda b: b["quality"][loss] < 2.8,
          lambda r, b, codec: r["quality"][loss] <= LOSS_WITHIN.get(codec, 1.03) * b["quality"][loss])
