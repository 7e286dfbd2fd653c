"""metrics.jsonl after a power loss or a full disk: its last line may be cut short. A resume must
drop that line with a warning (the checkpoint says where the run stands), never fail on it."""

from __future__ import annotations

import json
import logging

from invfold.components.train.trainer import MetricsLog


def _line(step: int, split: str = "train") -> str:
    return json.dumps({"split": split, "step": step, "loss": 1.0 / step}) + "\n"


def test_a_torn_last_line_is_dropped_with_a_warning_on_resume(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    good = [_line(1), _line(2), _line(2, "validation"), _line(3), _line(4)]
    path.write_text("".join(good) + _line(5)[:17])  # step 5's line torn mid-write
    with caplog.at_level(logging.WARNING):
        log = MetricsLog(str(tmp_path), resumed_step=4)
    log.write("train", 5, {"loss": 0.2})
    log.close()
    lines = path.read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 2, 3, 4, 5]
    assert lines[:5] == [g.rstrip("\n") for g in good]
    assert "dropped 1 unreadable line(s) (line 6)" in caplog.text


def test_lines_past_the_checkpoint_and_undecodable_bytes_are_dropped(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes((_line(1) + _line(2) + _line(3)).encode() + b"\xff\xfe{\n")
    with caplog.at_level(logging.WARNING):
        MetricsLog(str(tmp_path), resumed_step=2).close()
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2]
    assert "dropped 1 unreadable line(s)" in caplog.text
