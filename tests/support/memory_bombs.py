"""Tiny inputs that ask for unbounded memory (issue 23, item 4), and a runner that starts a
command under an address-space limit so that such an input fails the way it would on a small pod.

Address-space limits (RLIMIT_AS) and this project's imports, measured with
`python -c "import X"` under resource.setrlimit in a bisection (2-core CI machine):
- `invfold --help`, `import invfold.components.prep.run` (numpy, pyarrow, gemmi): under 512 MiB;
  so prep runs under the 1 GiB the issue asks for.
- `import torch` (PyPI's CUDA build, run on CPU): 3.1 GiB of address space (3,136 MiB bisected;
  VmSize 3.19 GB, RSS 0.52 GB after the import) before any tensor exists: every command that loads
  a model (design, evaluate, export) cannot even start under 1 GiB, so those run under
  TORCH_LIMIT = 4 GiB: still far below what each bomb asks (17 GB for hidden=65536's first weight,
  10.8 GB for a 30,000-residue k-NN), so the test fails if the bound is missing.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np

GIB = 2**30
PREP_LIMIT = 1 * GIB
TORCH_LIMIT = 4 * GIB
ATOMS = ("N", "CA", "C", "O")


def run_limited(args: list[str], limit: int, timeout: float = 300, module: bool = True) -> subprocess.CompletedProcess:
    """`python -m invfold ARGS` (`python ARGS` with module=False) in a child whose address space
    is capped at `limit` bytes (set in the child before exec, so the test process is untouched);
    one thread per math library, since the address space each extra thread reserves is not what
    these tests measure."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    threads = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *(["-m", "invfold"] if module else []), *args],
        preexec_fn=cap,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **threads},
    )


_MEASURE = """
import resource, subprocess, sys
limit = int(sys.argv[1])
def cap():
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
done = subprocess.run(sys.argv[2:], preexec_fn=cap, capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr)
sys.exit(done.returncode)
"""


def run_measured(args: list[str], limit: int = 0, timeout: float = 300) -> tuple[subprocess.CompletedProcess, int]:
    """(result, peak RSS in bytes) of `python -m invfold ARGS`, optionally under RLIMIT_AS
    `limit`: the resident memory a pod's cgroup limit counts (the kernel kills a pod past it, where
    RLIMIT_AS would have raised MemoryError). Measured as RUSAGE_CHILDREN in a process of its own,
    whose only child is the command, so no earlier command of the test session is counted."""
    threads = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(limit), sys.executable, "-m", "invfold", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **threads},
    )
    *lines, peak = done.stderr.rstrip("\n").split("\n")
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, "\n".join(lines)), int(peak)


def _backbone(length: int, row: int = 100) -> np.ndarray:
    """A straight backbone folded back and forth in rows of `row` residues 10 A apart (a chain
    break at each turn), so that every coordinate stays within what a PDB column holds."""
    coords = np.zeros((length, 4, 3))
    for i in range(length):
        turn, along = divmod(i, row)
        sign, x = (1, along * 3.83) if turn % 2 == 0 else (-1, (row - along) * 3.83)
        y = 10.0 * turn
        coords[i] = [[x, y, 0], [x + sign * 1.46, y + 0.3, 0], [x + sign * 2.5, y, 0], [x + sign * 2.5, y + 1.23, 0]]
    return coords


def huge_numbering_cif(path: Path, last_number: int = 10**9, residues: int = 5) -> Path:
    """A small mmCIF (about 1.8 KB, written by gemmi) of `residues` alanines, the last numbered
    `last_number`: no deposited sequence, so the reader fills the numbering gap from author numbers."""
    import gemmi

    from tests.support.structures import backbone_residue

    structure, model, chain = gemmi.Structure(), gemmi.Model("1"), gemmi.Chain("A")
    for i, xyz in enumerate(_backbone(residues)):
        number = last_number if i == residues - 1 else i + 1
        chain.add_residue(backbone_residue("ALA", number, list(zip(ATOMS, xyz, strict=True))))
    model.add_chain(chain)
    structure.add_model(model)
    structure.setup_entities()
    structure.make_mmcif_document().write_file(str(path))
    return path


def long_chain_jsonl(path: Path, length: int = 30_000) -> Path:
    """One chain-set line of a `length`-residue backbone (sound within each row of `_backbone`)."""
    import json

    coords = _backbone(length).round(3)
    obj = {"name": "long.A", "seq": "A" * length, "coords": {a: coords[:, i].tolist() for i, a in enumerate(ATOMS)}}
    path.write_text(json.dumps(obj) + "\n")
    return path


def gzip_long_line(path: Path, line_bytes: int = 256 * 2**20, before: bytes = b"") -> Path:
    """A gzip (about 0.25 MB) of `before` (whole lines) then one chain-set line of `line_bytes`
    bytes: valid JSON whose `seq` is one long string, compressed in 1 MiB chunks (never held whole
    in memory here)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    head, tail = b'{"name": "bomb.A", "seq": "', b'", "coords": {}}\n'
    out = [compressor.compress(before), compressor.compress(head)]
    left = line_bytes - len(head) - len(tail)
    chunk = b"A" * 2**20
    while left > 0:
        out.append(compressor.compress(chunk[: min(left, len(chunk))]))
        left -= len(chunk)
    out.append(compressor.compress(tail))
    out.append(compressor.flush())
    path.write_bytes(b"".join(out))
    return path


def gzip_ts50_list(path: Path, list_bytes: int = 250 * 2**20, residues: int = 2000) -> Path:
    """A gzip (875 KB for the default 250 MiB) of one TS50 list of `list_bytes` bytes once
    expanded, under max_file_bytes: entries whose `coords` hold `residues` all-zero residues as nested lists
    (the costliest JSON to decode whole: each 8-byte `[0,0,0],` becomes a Python list of about
    80 bytes) for a one-residue `seq`, so each entry is a counted skip and nothing is kept.
    Compressed as it is made, never held whole here."""
    residue = b"[" + b",".join([b"[0,0,0]"] * 4) + b"]"
    entry = b'{"name": "bomb.A", "seq": "A", "coords": [' + b",".join([residue] * residues) + b"]}"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    out, written, first = [compressor.compress(b"[")], 1, True
    while written + len(entry) + 2 <= list_bytes:
        piece = entry if first else b"," + entry
        out.append(compressor.compress(piece))
        written, first = written + len(piece), False
    out.append(compressor.compress(b"]"))
    out.append(compressor.flush())
    path.write_bytes(b"".join(out))
    return path


def oversized_model_file(path: Path, hidden: int = 65536) -> Path:
    """An invfold model file (torch.save of plain containers, about 1.7 KB) whose config declares
    `hidden` but whose state dict is empty: building the network first would allocate it."""
    import torch

    from invfold.components.model.config import ModelConfig
    from invfold.components.model.io import FORMAT

    config = ModelConfig.preset("tiny").to_dict()
    config["hidden"] = hidden
    torch.save({"format": FORMAT, "config": config, "state_dict": {}}, str(path))
    return path


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The command's error line when it exited 2 with one `invfold CMD: error: ...` line last on
    stderr (progress log lines may come before it) and no traceback; an AssertionError showing the
    output otherwise."""
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if ": error: " in line]
    assert result.returncode == 2 and "Traceback" not in result.stderr and errors == lines[-1:], (
        result.returncode,
        result.stderr[-3000:],
    )
    return lines[-1]
