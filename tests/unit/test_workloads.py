"""Tests for vllm_proxima.bench.workloads: seeded lengths and token-exact prompts."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    from vllm_proxima.bench import workloads as wl
except ImportError:  # plain checkout without the dev overlay on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "vllm-proxima" / "src"))
    from vllm_proxima.bench import workloads as wl

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------
# lengths (no tokenizer)
# --------------------------------------------------------------------------


def test_baseline_lengths_in_range_and_seeded() -> None:
    w = wl.make_workload("baseline")
    reqs = w.sample(5000, seed=0)
    prompts = np.array([r.prompt_len for r in reqs])
    outputs = np.array([r.output_len for r in reqs])
    assert prompts.min() == 50 and prompts.max() == 200  # both ends reachable
    assert outputs.min() == 32 and outputs.max() == 256
    assert prompts.mean() == pytest.approx(125, abs=3)
    assert outputs.mean() == pytest.approx(144, abs=4)
    assert w.sample(5000, seed=0) == reqs
    assert w.sample(5000, seed=1) != reqs


def test_sharegpt_lognormal_parameters_match_the_documented_means() -> None:
    w = wl.make_workload("sharegpt")
    assert isinstance(w, wl.ShareGPTLike)
    params = w.params()
    assert params["prompt"]["mean_unclipped"] == pytest.approx(161.31, abs=0.01)
    assert params["output"]["mean_unclipped"] == pytest.approx(337.99, abs=0.01)
    assert params["prompt"]["mu"] == pytest.approx(math.log(161.31) - 0.5, abs=1e-5)
    reqs = w.sample(50_000, seed=0)
    prompts = np.array([r.prompt_len for r in reqs])
    outputs = np.array([r.output_len for r in reqs])
    # Clipping at [4, 2048] / [4, 1024] trims the tails a little.
    assert 150 < prompts.mean() < 165
    assert 300 < outputs.mean() < 340
    assert np.median(prompts) == pytest.approx(98, abs=4)
    assert np.median(outputs) == pytest.approx(245, abs=8)
    assert prompts.min() >= 4 and prompts.max() <= 2048 and outputs.max() <= 1024


def test_shared_system_groups_and_prefixes() -> None:
    w = wl.make_workload("shared-system")
    assert isinstance(w, wl.SharedSystem)
    systems = w.system_lengths(seed=0)
    assert len(systems) == 8 and all(200 <= s <= 1000 for s in systems)
    reqs = w.sample(2000, seed=0)
    assert {r.group for r in reqs} == set(range(8))
    for r in reqs:
        assert r.group is not None
        assert r.prefix_len == systems[r.group]
        assert 20 <= r.prompt_len - r.prefix_len <= 200
        assert 32 <= r.output_len <= 256


def test_scale_and_cap() -> None:
    w = wl.make_workload("baseline", scale=0.5, max_total_len=100)
    assert w.params()["prompt"] == {"dist": "uniform", "min": 25, "max": 100}
    reqs = w.sample(2000, seed=0)
    assert all(r.prompt_len + r.output_len <= 100 for r in reqs)
    assert all(r.output_len >= 1 for r in reqs)
    scaled = wl.make_workload("sharegpt", scale=0.25).params()
    assert scaled["prompt"]["median"] == pytest.approx(
        wl.make_workload("sharegpt").params()["prompt"]["median"] / 4, rel=1e-3
    )


def test_shared_system_that_cannot_fit_is_refused() -> None:
    with pytest.raises(wl.WorkloadError, match="scale the workload down"):
        wl.make_workload("shared-system", max_total_len=300).sample(10, seed=0)


def test_bad_names_and_scales() -> None:
    with pytest.raises(wl.WorkloadError, match="unknown workload"):
        wl.make_workload("nope")
    with pytest.raises(wl.WorkloadError, match="scale"):
        wl.make_workload("baseline", scale=0)


# --------------------------------------------------------------------------
# prompt text (tiny model's tokenizer)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("transformers")
    folder = REPO / "models" / "tiny-llama"
    if not (folder / "tokenizer.json").is_file():
        script = REPO / "scripts" / "tiny_model.py"
        spec = importlib.util.spec_from_file_location("tiny_model", script)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        folder = module.make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")
    return wl.load_tokenizer(folder)


@pytest.mark.parametrize("name", wl.WORKLOAD_NAMES)
def test_written_prompts_are_token_exact(name: str, tokenizer: Any, tmp_path: Path) -> None:
    scale = 0.4 if name == "shared-system" else 1.0  # fit the tiny model's 1024
    w = wl.make_workload(name, scale=scale, max_total_len=1024)
    written = wl.write_dataset(w, 40, tokenizer, tmp_path / f"{name}.jsonl", seed=3)
    lines = [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    assert len(lines) == 40
    assert [x["prompt_len"] for x in lines] == [r.prompt_len for r in written.requests]
    for x in lines:
        # what vLLM's custom dataset and the server count
        assert len(tokenizer(x["prompt"]).input_ids) == x["prompt_len"]
        assert isinstance(x["output_tokens"], int) and x["output_tokens"] >= 1


def test_shared_system_prompts_share_exact_token_prefixes(tokenizer: Any, tmp_path: Path) -> None:
    w = wl.make_workload("shared-system", scale=0.4, max_total_len=1024)
    wl.write_dataset(w, 60, tokenizer, tmp_path / "s.jsonl", seed=0)
    first: dict[int, list[int]] = {}
    for line in (tmp_path / "s.jsonl").read_text().splitlines():
        x = json.loads(line)
        ids = tokenizer(x["prompt"]).input_ids
        prefix = ids[: x["prefix_len"]]
        assert first.setdefault(x["group"], prefix) == prefix
    assert len(first) >= 6  # most of the 8 system prompts are used


def test_content_seed_changes_words_not_lengths(tokenizer: Any, tmp_path: Path) -> None:
    w = wl.make_workload("baseline")
    a = wl.write_dataset(w, 10, tokenizer, tmp_path / "a.jsonl", seed=0, content_seed=0)
    b = wl.write_dataset(w, 10, tokenizer, tmp_path / "b.jsonl", seed=0, content_seed=1000)
    c = wl.write_dataset(w, 10, tokenizer, tmp_path / "c.jsonl", seed=0, content_seed=0)
    assert a.requests == b.requests
    text = {
        p: [json.loads(x)["prompt"] for x in p.read_text().splitlines()]
        for p in (a.path, b.path, c.path)
    }
    assert text[a.path] == text[c.path]  # deterministic
    assert all(x != y for x, y in zip(text[a.path], text[b.path], strict=True))  # fresh words


def test_read_lengths_round_trip_and_errors(tokenizer: Any, tmp_path: Path) -> None:
    w = wl.make_workload("baseline")
    written = wl.write_dataset(w, 12, tokenizer, tmp_path / "w.jsonl", seed=0)
    assert wl.read_lengths(written.path) == written.requests
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt": "hi", "output_tokens": 3}) + "\n")
    with pytest.raises(wl.WorkloadError, match="prompt_len"):
        wl.read_lengths(other)
    with pytest.raises(wl.WorkloadError, match=".jsonl"):
        wl.write_dataset(w, 2, tokenizer, tmp_path / "w.json")


def test_cli_lengths_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert wl.main(["sharegpt", "--num", "1000", "--lengths-only"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_requests"] == 1000 and out["params"]["name"] == "sharegpt"
