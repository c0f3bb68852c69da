"""The Grafana dashboard (``observability/grafana/proxima.json``): generated, importable the way
upstream's is, and querying only series that exist. The live check against a server's
``/metrics`` is ``tests/server/test_server.py::test_metrics_has_every_dashboard_series``."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
OBS = REPO / "observability"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"obs_{name}", OBS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def series_names(dashboard: dict) -> set[str]:
    """Metric names the dashboard's queries read, without histogram/counter suffixes."""
    names = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"\b((?:vllm|proxima):[a-z0-9_]+)", target["expr"]):
                names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def dashboard_json() -> dict:
    return json.loads((OBS / "grafana" / "proxima.json").read_text())


def test_committed_json_is_what_the_generator_makes() -> None:
    make = load("make_dashboard")
    assert (OBS / "grafana" / "proxima.json").read_text() == make.render_json()


def test_layout_and_datasource_follow_upstreams_dashboard() -> None:
    d = dashboard_json()
    assert d["schemaVersion"] == 39
    assert [v["name"] for v in d["templating"]["list"]] == ["DS_PROMETHEUS", "model_name"]
    cells = set()
    for panel in d["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        assert panel["targets"], panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        cell = (pos["x"], pos["y"])
        assert cell not in cells, f"two panels at {cell}"
        cells.add(cell)
        for target in panel["targets"]:
            assert '{model_name="$model_name"}' in target["expr"], target["expr"]
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


def test_every_proxima_series_is_one_proxima_exports() -> None:
    from vllm_proxima.metrics import METRICS

    exported = {name for name, _, _ in METRICS.values()}
    wanted = {n for n in series_names(dashboard_json()) if n.startswith("proxima:")}
    assert wanted, "the dashboard shows no proxima series"
    assert wanted <= exported, wanted - exported
    # held + cached + free add up to the pool: the stacked panel must show all three
    assert {"proxima:kv_slots_used", "proxima:kv_slots_cached", "proxima:kv_slots_free"} <= wanted


def test_every_vllm_series_is_one_vllm_defines() -> None:
    loggers = pytest.importorskip("vllm.v1.metrics.loggers")
    source = Path(loggers.__file__).read_text()
    defined = set(re.findall(r'"(vllm:[a-z0-9_]+)"', source))
    wanted = {n for n in series_names(dashboard_json()) if n.startswith("vllm:")}
    missing = {n for n in wanted if n not in defined and n.removesuffix("_total") not in defined}
    assert not missing, missing


def test_render_substitutes_the_template_variables_and_draws(tmp_path: Path) -> None:
    render = load("render")
    expr = 'rate(vllm:x_total{model_name="$model_name"}[$__rate_interval])'
    assert render.substitute(expr, "tiny", "15s") == 'rate(vllm:x_total{model_name="tiny"}[15s])'
    panels = [
        {
            "title": "a",
            "unit": "percentunit",
            "stacked": True,
            "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8},
            "targets": [
                {"legend": "held", "series": [{"values": [[100, "0.5"], [102, "0.25"]]}]},
                {"legend": "free", "series": [{"values": [[100, "0.5"], [102, "NaN"]]}]},
            ],
        },
        {
            "title": "b",
            "unit": "s",
            "stacked": False,
            "gridPos": {"x": 12, "y": 0, "w": 12, "h": 8},
            "targets": [{"legend": "none", "series": []}],
        },
    ]
    out = tmp_path / "d.png"
    render.draw(panels, 100.0, out, "t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
