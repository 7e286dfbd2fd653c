"""Horovod runs a collective only at its next cycle (HOROVOD_CYCLE_TIME), so the loop's per-step
agreement must travel in the cycle of the step's last gradients, not in a cycle of its own after
them (about one cycle per step lost, a tenth of a `small` step on CPU). Read from Horovod's own
timeline (rank 0 writes every tensor's activity; cycle markers with HOROVOD_TIMELINE_MARK_CYCLES),
format as written by horovod/common/timeline.cc (TimelineWriter::DoWriteEvent, DoWriteMarker)."""

from __future__ import annotations

import bisect
import json

import pytest

from tests.support.training import run_job, summary, tiny_config

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

AGREEMENT = "allreduce.invfold.agreement"  # Horovod prefixes the name HorovodStrategy gives it


def _cycles_by_tensor(timeline: list[dict]) -> dict[str, set[int]]:
    """Tensor name -> the cycles (index of the last CYCLE_START before it) in which it was
    all-reduced (negotiation may start a cycle earlier)."""
    names = {e["pid"]: e["args"]["name"] for e in timeline if e.get("ph") == "M" and "name" in e.get("args", {})}
    starts = sorted(e["ts"] for e in timeline if e.get("ph") == "i" and e.get("name") == "CYCLE_START")
    cycles: dict[str, set[int]] = {}
    for e in timeline:
        if e.get("ph") == "B" and e.get("name") == "ALLREDUCE" and e.get("pid") in names:
            cycles.setdefault(names[e["pid"]], set()).add(bisect.bisect_right(starts, e["ts"]))
    return cycles


def test_the_agreement_travels_in_the_cycle_of_the_last_gradients(synthetic_prepared, tmp_path, monkeypatch):
    timeline_file = tmp_path / "timeline.json"
    monkeypatch.setenv("HOROVOD_TIMELINE", str(timeline_file))
    monkeypatch.setenv("HOROVOD_TIMELINE_MARK_CYCLES", "1")
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "50")  # cycles far apart: no two steps share one
    cfg = tiny_config(synthetic_prepared, tmp_path / "run", strategy="horovod", max_steps=12)
    assert run_job(cfg) == 0
    assert summary(tmp_path / "run")["step"] == cfg.max_steps

    cycles = _cycles_by_tensor(json.loads(timeline_file.read_text()))
    agreement = cycles[AGREEMENT]
    # DistributedOptimizer names each gradient's all-reduce after its parameter; the loop's other
    # all-reduces (validation) are unnamed
    gradients = set().union(
        *(
            c
            for name, c in cycles.items()
            if name.startswith("allreduce.") and "noname" not in name and name != AGREEMENT
        )
    )
    assert len(agreement) == cfg.max_steps
    # Before: never (the agreement was started after the gradients were waited for). A tick that
    # falls between the last gradient and the agreement, microseconds apart, may split a step.
    shared = len(agreement & gradients)
    assert shared >= 0.75 * cfg.max_steps, (shared, sorted(agreement), sorted(gradients))
