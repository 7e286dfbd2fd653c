"""The bundled real sample (see PROVENANCE.md; rebuilt by scripts/build_sample_data.py)."""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
SAMPLE_CHAIN_SET = DATA_DIR / "sample_chain_set.jsonl.gz"
SAMPLE_SPLITS = DATA_DIR / "sample_chain_set_splits.json"
