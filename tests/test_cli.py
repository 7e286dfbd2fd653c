"""One handler for every subcommand: an error the project raises on purpose (InvfoldError) ends
`invfold` with `invfold <cmd>: error: <message>` on stderr and the error's exit code, never a
traceback; every error the project raises on purpose is an InvfoldError."""

from __future__ import annotations

import pytest

from invfold.cli import main
from invfold.components.export.onnx_export import ParityError
from invfold.components.launch.base import LaunchError
from invfold.components.launch.schema import ManifestError
from invfold.components.model.published import PublishedWeightsError
from invfold.components.tracking import TrackingError
from invfold.errors import ConfigError, InputError, InvfoldError
from invfold.pipelines.compile import SubmitError
from invfold.pipelines.local import PipelineFailed


@pytest.mark.parametrize(
    "error, code",
    [
        (ConfigError, 2),
        (InputError, 2),
        (PublishedWeightsError, 2),
        (ParityError, 1),
        (LaunchError, 1),
        (ManifestError, 1),
        (TrackingError, 1),
        (SubmitError, 1),
        (PipelineFailed, 1),
    ],
)
def test_every_deliberate_error_is_an_invfold_error_with_its_exit_code(error, code):
    assert issubclass(error, InvfoldError) and error.exit_code == code


def _garbage(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"not a model")
    return path


CASES = [
    # (subcommand line, files to make, text the message must contain)
    ("evaluate {tmp}/missing.pt --data {tmp} --out {tmp}/eval", "missing.pt"),
    ("evaluate {garbage} --data {tmp} --out {tmp}/eval", "expected an invfold model file"),
    ("design {garbage} {tmp}/x.pdb --out {tmp}/d.fasta -T 0", "DesignConfig.temperature"),
    ("design {garbage} {tmp}/x.pdb --out {tmp}/d.fasta --fixed 5-2", "fixed positions"),
    ("design {tmp}/missing.pt {tmp}/x.pdb --out {tmp}/d.fasta", "missing.pt"),
    ("export {garbage} --out {tmp}/model.txt", "ExportConfig.out_path"),
    ("train --data {tmp} --out {tmp}/t --zero-stage 2 --max-steps 1", "needs strategy 'deepspeed'"),
    ("train --data {tmp} --out {tmp}/t --model nonsense=1 --max-steps 1", "unknown ModelConfig fields ['nonsense']"),
    ("train --data {tmp} --out {tmp}/t --recipe full", "give max_steps, epochs, time_budget_s"),
    ("train --data {tmp} --out {tmp}/t", "index.json: expected an existing file"),  # before any process starts
    ("weights import nosuch:v1 --out {tmp}/w.pt", "nosuch:v1"),
    ("submit --host http://127.0.0.1:9 --data s3://b/x --param oops", "--param expects NAME=VALUE"),
]


@pytest.mark.parametrize("line, expected", CASES, ids=[c[0].split()[0] + f"-{i}" for i, c in enumerate(CASES)])
def test_a_user_mistake_is_one_error_line_and_an_exit_code(line, expected, tmp_path, capsys):
    argv = line.format(tmp=tmp_path, garbage=_garbage(tmp_path)).split()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    (first, *_) = err.splitlines()
    assert first.startswith(f"invfold {argv[0]}: error: ") and expected in err, err
