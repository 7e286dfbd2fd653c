"""Where the repository, the shared real data set (beside the repository) and the build cache
(scripts/cache.sh's INVFOLD_CACHE_DIR, outside every clone) are."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
CACHE_ROOT = Path(os.environ.get("INVFOLD_CACHE_DIR") or Path.home() / ".cache" / "invfold")
