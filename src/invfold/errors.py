"""One base for every error the project raises on purpose.

`invfold` catches `InvfoldError` once (src/invfold/cli.py), prints `invfold <cmd>: error: <message>`
and exits with the error's `exit_code`; anything else (a library's exception, or a bug) is one
line naming its type, exit 1, and its traceback under -v. The errors under it live beside the
code that raises them:

- `ConfigError` (here): a config field or command-line option out of range (exit 2);
- `InputError` (here): a problem with one input file, naming file, line, field, expectation (exit 2);
- `PublishedWeightsError` (components/model): an unknown published model or a missing package (exit 2);
- `NonFiniteWeightsError` (components/model/io.py): a model with NaN/inf weights is neither saved
  nor loaded (exit 1); `NonFiniteTrainingError` (components/train/trainer.py): a run of
  non-finite training steps (exit 3);
- `ParityError` (components/export): ONNX and PyTorch logits differ beyond the tolerance (exit 1);
- `LaunchError`, `ManifestError` (components/launch): the training job failed or its manifest is
  invalid (exit 1);
- `TrackingError` (components/tracking): MLflow could not record what a step needs (exit 1);
- `PipelineFailed`, `SubmitError` (pipelines): a pipeline step failed, or KFP refused a run (exit 1).
"""

from __future__ import annotations

import reprlib

# What `invfold` exits with (every --help ends with it; the README's table is this text)
EXIT_STATUS = """exit status:
  0    done
  1    a step failed: a training job, the ONNX parity gate, MLflow, the KFP API, a pipeline step; an unexpected error
  2    a mistake in the command: an option, an input file, a model reference (one line says which)
  3    training stopped: a run of non-finite steps (nothing saved)
  130  invfold run stopped by SIGINT (Ctrl-C): every process it started stopped, its MLflow runs KILLED
  141  the reader of its output went away (`invfold ... | head`), as for any tool killed by SIGPIPE
  143  stopped by SIGTERM after writing a checkpoint (run it again to resume); invfold run: as for 130"""


def exit_status(codes: tuple[int, ...] | None = None) -> str:
    """EXIT_STATUS with only the lines of `codes` (None: every line): a command's --help lists
    the codes it can return (`invfold design` trains nothing, so never exits 3 or 143)."""
    if codes is None:
        return EXIT_STATUS
    head, *lines = EXIT_STATUS.splitlines()
    return "\n".join([head, *(line for line in lines if int(line.split()[0]) in codes)])


def redact_text(text: str) -> str:
    """Replaced by invfold.storage.redact when storage is imported (it sits above this module):
    every InputError message then shows URIs through storage.display_uri, credentials hidden."""
    return text


def shown(value: object) -> str:
    """A value as an error message shows it: a few levels deep and a few items long at most, so a
    deeply nested value from a file costs neither a RecursionError nor a page of text."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxother = 3, 6, 4, 60, 60
    return short.repr(value)


class InvfoldError(Exception):
    """An expected failure with a message a person can act on; `exit_code` is the CLI's status."""

    exit_code: int = 1


class ConfigError(InvfoldError, ValueError):
    """A config field (or the option that sets it) has a value the step cannot use."""

    exit_code = 2


class InputError(InvfoldError, ValueError):
    """A problem with one input, naming the file, where in it, the field, and what was expected.

    `location` is a line number (int) or a free phrase such as "record '1abc.A'" or "chain 'B'";
    `field` is a dotted field name ("coords.CA") or None for a problem with the whole file.
    """

    exit_code = 2

    def __init__(
        self,
        path,
        location: int | str | None,
        field: str | None,
        expected: str,
        got: object = None,
        *,
        reason: str = "invalid_input",
        name: str | None = None,
    ):
        self.path = str(path)
        self.location = location
        self.field = field
        self.expected = expected
        self.got = got
        self.reason = reason
        self.name = name
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.path
        if isinstance(self.location, int):
            where += f":{self.location}"
        elif self.location:
            where += f": {self.location}"
        what = f"field '{self.field}': expected {self.expected}" if self.field else f"expected {self.expected}"
        if self.got is not None:
            what += f", got {self.got}"
        return redact_text(f"{where}: {what}")
