# SPDX-License-Identifier: Apache-2.0
"""Convergence: 4 DDP ranks over gloo train the digits MLP of examples/ddp_digits.py with
the same budget uncompressed and with each codec (error feedback on); every codec must end
within 2 percentage points of the uncompressed test accuracy."""

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load_example():
    # On sys.path so that the spawned ranks can import the worker function by name.
    sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location("ddp_digits", EXAMPLES / "ddp_digits.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ddp_digits"] = module
    spec.loader.exec_module(module)
    return module


def test_every_codec_converges_like_uncompressed_training():
    digits = load_example()
    budget = digits.Budget()
    codecs = digits.DEFAULT_CODECS
    families = {c.split(":")[0] for c in codecs}
    assert families == {"topk", "dgc", "qsgd", "terngrad", "minmax", "onebit", "sign",
                        "powersgd"}
    results = digits.compare(codecs, world_size=4, budget=budget, verbose=True)
    assert set(results) == {digits.BASELINE, *codecs}
    base = results[digits.BASELINE]
    assert base["accuracy"] >= 0.95, base
    failures = []
    for spec in codecs:
        r = results[spec]
        if r["accuracy"] < base["accuracy"] - 0.02:
            failures.append(f"{spec}: {100 * r['accuracy']:.1f}% vs {100 * base['accuracy']:.1f}%")
        # Every codec sent less than the dense float32 allreduce would have.
        assert r["bytes_per_step"] < base["bytes_per_step"], spec
    assert not failures, failures
