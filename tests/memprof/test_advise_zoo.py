"""`memprof advise` on a zoo model: ResNet-50 in torchvision's layout with ReLU(inplace) off.

Given the out-of-place variant, the advice must recover torchvision's own choice (every ReLU in
place, nothing else) and its combined saving must equal the measured difference between the two
shipped variants (whose peaks scenarios/resnet50.yaml pins and tests/memprof/test_zoo.py checks).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memprof.advise import advise
from memprof.advise.analysis import candidate_op
from memprof.scenario import load_scenario

RESNET50 = Path(__file__).resolve().parents[2] / "scenarios" / "resnet50.yaml"
OFF, ON = "batch=1,inplace=false", "batch=1,inplace=true"


@pytest.mark.slow
def test_resnet50_advice_recovers_torchvisions_inplace_relus():
    loaded = load_scenario(RESNET50)
    specs = {v.name: v.spec for v in loaded.variants}
    candidates = [n.id for n in specs[OFF].program if candidate_op(specs[OFF], n) is not None]
    inplace_in_torchvision = [
        n.id for n in specs[ON].program if candidate_op(specs[ON], n) is None and n.id in candidates
    ]

    advice = advise(RESNET50, variant=OFF)

    # one stem ReLU and three per bottleneck (16 of them), all of them ReLU modules
    assert len(candidates) == 49
    assert {c["op"] for c in advice["candidates"]} == {"ReLU"}
    assert all(c["verdict"] == "safe" and c["proven"] for c in advice["candidates"])
    assert advice["switched"] == inplace_in_torchvision == candidates
    pinned = yaml.safe_load(RESNET50.read_text())["expect"]
    before, after = pinned[OFF]["peak_allocated"], pinned[ON]["peak_allocated"]
    assert advice["peak_before"] == before
    assert advice["peak_after"] == after
    assert advice["peak_before"] - advice["peak_after"] == before - after == 38533120
