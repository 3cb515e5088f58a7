"""Chargeback per team and period: from the ledger's periods, and `gpuplane report costs` on simulator output."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from gpuplane.accounting import CostLedger, PoolPrice, chargeback
from gpuplane.cli import main
from tests.unit.test_sim_accounting import _simulate

PRICES = {"od": PoolPrice(2.0, "on-demand"), "spot": PoolPrice(0.5, "spot")}
DAY = 86400.0


def _ledger() -> CostLedger:
    ledger = CostLedger(PRICES)
    ledger.run("j1", "a", "batch", "od", 1, 0.0, 10 * DAY)  # ten days
    ledger.run("j2", "b", "batch", "spot", 4, 8 * DAY, 9 * DAY, lost_s=3600.0)
    return ledger


def test_days_sum_into_weeks_months_and_the_whole_run():
    entries = [("sim", p) for p in _ledger().periods()]
    weeks = chargeback(entries, "week", DAY)
    assert [(r.team, r.label) for r in weeks] == [("a", "week 1"), ("a", "week 2"), ("b", "week 2")]
    assert [r.usage.gpu_s / 3600 for r in weeks] == pytest.approx([7 * 24, 3 * 24, 4 * 24])
    assert weeks[2].usage.lost_gpu_s == 4 * 3600 and weeks[2].usage.spot_gpu_s == 4 * DAY
    whole = chargeback(entries, "all", DAY)
    assert [(r.team, r.label, r.start) for r in whole] == [("a", "all", 0.0), ("b", "all", 0.0)]
    assert whole[0].usage.cost == pytest.approx(10 * 24 * 2.0)
    assert [r.label for r in chargeback(entries, "month", DAY)] == ["month 1", "month 1"]


def test_a_period_the_records_cannot_give_is_an_error():
    entries = [("sim", p) for p in _ledger().periods()]
    with pytest.raises(ValueError, match="not one of day, week, month, all"):
        chargeback(entries, "hour", DAY)
    with pytest.raises(ValueError, match="not a whole number"):
        chargeback(entries, "day", 7 * DAY)


def test_report_costs_writes_csv_and_html_that_add_up_to_the_simulated_cost(tmp_path: Path, capsys):
    figures = tmp_path / "out.json"
    assert _simulate(tmp_path, "--compare", "fifo,tiresias", "--json", str(figures)) == 0
    out_csv, out_html = tmp_path / "cb.csv", tmp_path / "cb.html"
    args = [
        "report",
        "costs",
        "--from",
        str(figures),
        "--period",
        "day",
        "--csv",
        str(out_csv),
        "--html",
        str(out_html),
    ]
    assert main(args) == 0
    data = json.loads(figures.read_text())
    rows = list(csv.DictReader(out_csv.open()))
    for name in ("fifo", "tiresias"):
        mine = [r for r in rows if r["source"] == name]
        assert sum(float(r["cost"]) for r in mine) == pytest.approx(data["policies"][name]["cost"]["total"])
        assert sum(float(r["lost_cost"]) for r in mine) == pytest.approx(
            data["policies"][name]["cost"]["usage"]["lost_cost"]
        )
        for period in {r["period"] for r in mine}:
            shares = [float(r["share_of_period_cost"]) for r in mine if r["period"] == period]
            assert sum(shares) == pytest.approx(1.0)
    assert {r["team"] for r in rows} == {"a", "b"}
    page = out_html.read_text()
    assert "<h2>fifo</h2>" in page and "<h2>tiresias</h2>" in page and "not charged to teams" in page
    out = capsys.readouterr().out
    assert "cost per team" in out and "capacity held by no job" in out


def test_report_costs_on_one_policy(tmp_path: Path):
    figures, out_csv = tmp_path / "out.json", tmp_path / "cb.csv"
    assert _simulate(tmp_path, "--compare", "fifo,gpuplane", "--json", str(figures)) == 0
    assert main(["report", "costs", "--from", str(figures), "--policy", "gpuplane", "--csv", str(out_csv)]) == 0
    assert {r["source"] for r in csv.DictReader(out_csv.open())} == {"gpuplane"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read it"),
        ("id,team\n", "not JSON"),
        ('{"trace": {}}', "no 'policies' object"),
        (
            '{"policies": {"fifo": {"cost": {"total": 1}}}}',
            "period_s is missing.*simulate --json again",
        ),
        ('{"policies": {"fifo": {"cost": {"period_s": 86400}, "per_team": {"a": {}}}}}', "malformed"),
    ],
)
def test_report_costs_on_bad_input_names_the_problem_and_exits_2(tmp_path: Path, capsys, content, message):
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", "costs", "--from", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(message, err)


def test_report_costs_names_the_policies_a_file_has(tmp_path: Path, capsys):
    figures = tmp_path / "out.json"
    assert _simulate(tmp_path, "--compare", "fifo", "--json", str(figures)) == 0
    assert main(["report", "costs", "--from", str(figures), "--policy", "sjf"]) == 2
    assert "no policy sjf in it (it has fifo)" in capsys.readouterr().err
