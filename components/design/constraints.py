"""ProteinMPNN's per-design JSON inputs: fixed, tied and omitted positions, per-residue and global bias.

The files have the shapes ProteinMPNN's helper scripts write (helper_scripts/make_*_dict.py), so
existing workflows carry over. All but the global bias are keyed by the entry name
(positions.entry_name(record)); a position is 1-based per chain (an int) or a residue ID as
LigandMPNN writes it (a string: author number and insertion code, "23" or "42C", with or without
the chain, "B42C"; positions.index_of). A file is `.jsonl` (one JSON object
a line, the lines merged; an entry on two lines is an error) or `.json` (one object).

  fixed positions   {entry: {chain: [positions]}}                 kept native
  omit              {entry: {chain: [[[positions], "LETTERS"], ...]}}   letters never designed there
  bias by residue   {entry: {chain: [[21 floats] per residue]}}   logit bias, alphabet ACDEFGHIKLMNPQRSTVWYX
                    {entry: {chain: {"42C": [21 floats], ...}}}  or by residue ID, for those named
  global bias       {"A": -1.1, ...}                              logit bias everywhere
  tied positions    {entry: [{"A": [1], "B": [1]}, ...]}         one letter per group; or weighted,
                    {entry: [{"A": [[1, 2], [1.0, 1.0]], ...}]}  as make_pos_neg_tied_positions_dict.py
  PSSM              {entry: {chain: {"pssm_coef": [L floats], "pssm_bias": [[21 floats] per residue],
                    "pssm_log_odds": [[21 floats] per residue]}}}  as make_pssm_input_dict.py

Biases are added to the logits before the temperature, as ProteinMPNN does: p ~ softmax((logits + bias) / T).
The X column (ProteinMPNN's 21st letter) is read and ignored: the model never designs X.
A PSSM acts on the probabilities as in ProteinMPNN's `sample` (sampling.group_distribution): with
pssm_bias_flag, p = (1 - pssm_multi * pssm_coef) p + pssm_multi * pssm_coef * pssm_bias; with
pssm_log_odds_flag, p is weighted by 1.001 where pssm_log_odds > pssm_threshold and 0.001 elsewhere;
then renormalized. The PSSM's X column is dropped (X is never designed): where it holds mass,
the result is upstream's distribution given that the letter is not X.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from invfold.components.design import positions as pos
from invfold.components.design.option_files import MPNN_ALPHABET, read_option_file
from invfold.components.model.sampling import Groups
from invfold.components.protein.alphabet import ALPHABET, NUM_AA
from invfold.components.protein.record import ChainRecord
from invfold.errors import ConfigError


@dataclass
class ConstraintFiles:
    """Paths of the JSON inputs (None: not given)."""

    fixed_positions: str | None = None
    omit_aa: str | None = None
    bias_by_res: str | None = None
    bias_aa: str | None = None
    tied_positions: str | None = None
    pssm: str | None = None
    pssm_multi: float = 0.0  # ProteinMPNN's --pssm_multi, --pssm_threshold, --pssm_log_odds_flag, --pssm_bias_flag
    pssm_threshold: float = 0.0
    pssm_log_odds: bool = False
    pssm_bias: bool = False


@dataclass
class Constraints:
    """What the files say for one record (L residues).

    fixed: bool [L]; omit: bool [L, 20]; bias: float32 [L, 20] (logit bias, before the temperature);
    tied: (indices, weights) per group of two or more positions.
    """

    fixed: np.ndarray
    omit: np.ndarray
    bias: np.ndarray
    tied: list[tuple[list[int], list[float]]] = field(default_factory=list)
    # the PSSM as sampling.Groups takes it, per position (None: no PSSM file): coef [L] (pssm_multi
    # * pssm_coef, 0 without the bias flag), bias [L, 20] (its X column dropped), weight [L, 20]
    pssm: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @staticmethod
    def none(length: int) -> Constraints:
        return Constraints(
            np.zeros(length, bool), np.zeros((length, NUM_AA), bool), np.zeros((length, NUM_AA), np.float32)
        )

    def groups(self, observed: torch.Tensor, temperature: float) -> Groups:
        """sampling.Groups: the tied groups, every other position alone. A member without a
        backbone has weight 0 (it keeps its native letter); every listed member counts in the
        group's size (the n of ProteinMPNN's tied_beta sum / n); a group's bias is its members'
        mean, with the union of their omitted letters."""
        length = len(self.fixed)
        per_position = torch.from_numpy(self.bias).float() / temperature
        per_position = per_position.masked_fill(torch.from_numpy(self.omit), float("-inf"))
        tied = {i for indices, _ in self.tied for i in indices}
        lists = [([i], [1.0]) for i in range(length) if i not in tied] + list(self.tied)
        lists.sort(key=lambda item: min(item[0]))  # untied positions stay groups in position order
        width = max(len(indices) for indices, _ in lists) if lists else 1
        members = torch.zeros(len(lists), width, dtype=torch.long)
        weights = torch.zeros(len(lists), width)
        bias = torch.zeros(len(lists), NUM_AA)
        size = torch.tensor([float(len(indices)) for indices, _ in lists])
        pssm = None if self.pssm is None else [torch.from_numpy(a).float() for a in self.pssm]
        pssm_groups = None if pssm is None else [torch.zeros(len(lists), *a.shape[1:]) for a in pssm]
        for g, (indices, w) in enumerate(lists):
            members[g] = torch.tensor(indices + [indices[0]] * (width - len(indices)))
            weights[g, : len(indices)] = torch.tensor(w, dtype=torch.float32) * observed[indices].float()
            bias[g] = per_position[indices].mean(0)
            for per_group, per_residue in zip(pssm_groups or [], pssm or [], strict=True):
                per_group[g] = per_residue[indices].mean(0)  # a tied group: its members' mean
        return Groups(members, weights, bias, size, *(pssm_groups or []))


def load_constraints(files: ConstraintFiles, record: ChainRecord) -> Constraints:
    """Read every given file for `record`; ConfigError naming the file, key and what was expected."""
    out = Constraints.none(len(record))
    chains = pos.chain_positions(record)
    entry = pos.entry_name(record)
    if files.fixed_positions:
        for chain, value, where in _chains_of(files.fixed_positions, entry, chains):
            for p in _position_list(value, where):
                out.fixed[pos.index_of(record, chains, chain, p, where)] = True
    if files.omit_aa:
        for chain, value, where in _chains_of(files.omit_aa, entry, chains):
            if not isinstance(value, list):
                raise ConfigError(f'{where}: expected a list of [[positions], "LETTERS"] pairs, got {value!r}')
            for k, item in enumerate(value):
                here = f"{where}[{k}]"
                if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], str)):
                    raise ConfigError(f'{here}: expected [[positions], "LETTERS"], got {item!r}')
                columns = _letters(item[1], here)
                for p in _position_list(item[0], here):
                    out.omit[pos.index_of(record, chains, chain, p, here), columns] = True
    if files.bias_by_res:
        for chain, value, where in _chains_of(files.bias_by_res, entry, chains):
            length = len(chains[chain])
            if isinstance(value, dict):  # {residue ID: row}; JSON keys are strings, so never 1-based
                for key, row in value.items():
                    out.bias[pos.index_of(record, chains, chain, key, where)] += _bias_row(row, f"{where}[{key!r}]")
                continue
            if not isinstance(value, list) or len(value) != length:
                got = f"{len(value)} rows" if isinstance(value, list) else repr(value)[:40]
                raise ConfigError(f"{where}: expected {length} rows (one per residue of chain {chain!r}), got {got}")
            for k, row in enumerate(value):
                out.bias[chains[chain][k]] += _bias_row(row, f"{where}[{k}] (position {k + 1})")
    if files.bias_aa:
        data = _read(files.bias_aa)
        if not isinstance(data, dict):
            raise ConfigError(f'{files.bias_aa}: expected {{"A": -1.1, ...}}, got {type(data).__name__}')
        for letter, value in data.items():
            if letter not in MPNN_ALPHABET or not _finite(value):
                raise ConfigError(
                    f"{files.bias_aa}: key {letter!r}: expected one of {MPNN_ALPHABET} with a finite number, "
                    f"got {value!r}"
                )
            if letter != "X":
                out.bias[:, ALPHABET.index(letter)] += float(value)
    if files.pssm:
        out.pssm = _pssm(files, entry, chains, len(record))
    if files.tied_positions:
        groups = _entry(files.tied_positions, entry)
        if not isinstance(groups, list):
            raise ConfigError(f"{files.tied_positions}: entry {entry!r}: expected a list of {{chain: positions}}")
        seen: dict[int, str] = {}
        for k, group in enumerate(groups):
            where = f"{files.tied_positions}: entry {entry!r}, group {k}"
            if not isinstance(group, dict) or not group:
                raise ConfigError(f'{where}: expected {{"A": [1], "B": [1]}}, got {group!r}')
            indices, weights = [], []
            for chain, value in group.items():
                here = f"{where}, chain {chain!r}"
                if isinstance(value, list) and len(value) == 2 and all(isinstance(v, list) for v in value):
                    plist, wlist = _position_list(value[0], here), value[1]
                    if len(wlist) != len(plist) or not all(_finite(w) for w in wlist):
                        raise ConfigError(f"{here}: expected one finite weight per position, got {wlist!r}")
                else:
                    plist, wlist = _position_list(value, here), [1.0] * len(value)
                for p, w in zip(plist, wlist, strict=True):
                    i = pos.index_of(record, chains, chain, p, here)
                    if i in seen or i in indices:
                        raise ConfigError(f"{here}: position {p} is already tied ({seen.get(i, where)})")
                    indices.append(i)
                    weights.append(float(w))
            for i in indices:
                seen[i] = where
            if len(indices) > 1:
                out.tied.append((indices, weights))
    return out


def _pssm(files: ConstraintFiles, entry: str, chains: dict[str, np.ndarray], length: int):
    """(coef [L], bias [L, 20], weight [L, 20]) from a make_pssm_input_dict.py file; chains it
    does not list (or lists empty) get no PSSM (coef 0, weight 1), as upstream leaves them."""
    coef = np.zeros(length, np.float32)
    bias = np.full((length, NUM_AA), 1.0 / NUM_AA, np.float32)
    weight = np.ones((length, NUM_AA), np.float32)
    for chain, value, where in _chains_of(files.pssm, entry, chains):
        if not value:
            continue
        index, n = chains[chain], len(chains[chain])
        if not isinstance(value, dict) or not {"pssm_coef", "pssm_bias", "pssm_log_odds"} <= set(value):
            raise ConfigError(f"{where}: expected {{pssm_coef, pssm_bias, pssm_log_odds}}, got {repr(value)[:80]}")
        c = value["pssm_coef"]
        if not isinstance(c, list) or len(c) != n or not all(_finite(v) and 0 <= v <= 1 for v in c):
            raise ConfigError(f"{where}: pssm_coef: expected {n} numbers in [0, 1] (per residue), got {repr(c)[:80]}")
        rows = {}
        for key in ("pssm_bias", "pssm_log_odds"):
            table = value[key]
            if not isinstance(table, list) or len(table) != n:
                raise ConfigError(f"{where}: {key}: expected {n} rows of 21 numbers, got {repr(table)[:80]}")
            rows[key] = np.stack([_pssm_row(row, f"{where}: {key}[{k}]") for k, row in enumerate(table)])
        if files.pssm_bias:
            coef[index] = files.pssm_multi * np.asarray(c, np.float32)
        if (rows["pssm_bias"] < 0).any():
            raise ConfigError(f"{where}: pssm_bias: expected rows of probabilities (numbers >= 0)")
        bias[index] = rows["pssm_bias"][:, :NUM_AA]  # as given; X's share leaves with the renormalization
        if files.pssm_log_odds:
            weight[index] = (rows["pssm_log_odds"][:, :NUM_AA] > files.pssm_threshold) + 0.001
    return coef, bias, weight


def _pssm_row(row, where: str) -> np.ndarray:
    if not isinstance(row, list) or len(row) != NUM_AA + 1 or not all(_finite(v) for v in row):
        raise ConfigError(f"{where}: expected 21 finite numbers in the order {MPNN_ALPHABET}, got {row!r}"[:300])
    return np.asarray(row, dtype=np.float32)


def _read(path: str):
    """The file's merged object, read and bounded as the data files are (option_files)."""
    return read_option_file(path).data


def designed_chains(path: str, entry: str | None) -> str:
    """ProteinMPNN's chain_id_jsonl {entry: [[designed], [fixed]]} -> "A,B", the designed chains of
    `entry` (None: the file's only entry), as --design-chains takes them."""
    if entry is None:
        data = _read(path)
        if not isinstance(data, dict) or len(data) != 1:
            raise ConfigError(f"{path}: several entries (or none): give --name to pick one")
        entry = next(iter(data))
    value = _entry(path, entry)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(part, list) for part in value)):
        raise ConfigError(f"{path}: entry {entry!r}: expected [[designed chains], [fixed chains]], got {value!r}")
    if not value[0] or not all(isinstance(c, str) and c for c in value[0]):
        raise ConfigError(f"{path}: entry {entry!r}: expected at least one designed chain id, got {value[0]!r}")
    return ",".join(value[0])


def _entry(path: str, entry: str):
    data = _read(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected an object keyed by entry name, got {type(data).__name__}")
    if entry not in data:
        names = ", ".join(list(data)[:10]) + (" ..." if len(data) > 10 else "")
        raise ConfigError(f"{path}: no entry {entry!r} (the structure's entry name); entries: {names or 'none'}")
    return data[entry]


def _chains_of(path: str, entry: str, chains: dict[str, np.ndarray]):
    """(chain, value, where) for each chain of the entry's {chain: value}; unknown chains are errors."""
    value = _entry(path, entry)
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: entry {entry!r}: expected {{chain: ...}}, got {type(value).__name__}")
    for chain, item in value.items():
        where = f"{path}: entry {entry!r}, chain {chain!r}"
        if chain not in chains:
            raise ConfigError(f"{where}: the structure has no such chain (chains: {', '.join(chains)})")
        yield chain, item, where


def _position_list(value, where: str) -> list[int | str]:
    if not isinstance(value, list) or not all(isinstance(p, int | str) and not isinstance(p, bool) for p in value):
        raise ConfigError(f'{where}: expected a list of 1-based positions or residue IDs ("42C"), got {value!r}')
    return value


def _letters(text: str, where: str) -> list[int]:
    bad = sorted(set(text) - set(MPNN_ALPHABET))
    if bad:
        raise ConfigError(f"{where}: letters {bad} are not in {MPNN_ALPHABET}")
    return [ALPHABET.index(c) for c in text if c != "X"]


def _bias_row(row, where: str) -> np.ndarray:
    if not isinstance(row, list) or len(row) not in (NUM_AA, NUM_AA + 1) or not all(_finite(v) for v in row):
        raise ConfigError(f"{where}: expected 21 finite numbers in the order {MPNN_ALPHABET}, got {row!r}"[:300])
    return np.asarray(row[:NUM_AA], dtype=np.float32)


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
