"""Which of the node's images the cluster lane removes before loading a new generation."""

from __future__ import annotations

import pytest

from tests.support.cluster import stale_node_images

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# `ctr -n k8s.io images ls` on the test node (columns trimmed): each imported image has its name and
# the `sha256:<id>` ref containerd's CRI adds; an older runtime generation was loaded before.
LISTING = """\
REF                                                     TYPE                            DIGEST      SIZE
docker.io/invfold-test/invfold-runtime:2787b4c1b730-cpu application/vnd.docker...v2+json sha256:0114 5.9 GiB
docker.io/invfold-test/invfold-runtime:1111aaaa2222-cpu application/vnd.docker...v2+json sha256:9999 5.9 GiB
invfold.test/pause:1                                    application/vnd.docker...v2+json sha256:64aa 750.7 KiB
sha256:0a64                                             application/vnd.docker...v2+json sha256:64aa 750.7 KiB
sha256:2a10                                             application/vnd.docker...v2+json sha256:0114 5.9 GiB
sha256:7777                                             application/vnd.docker...v2+json sha256:9999 5.9 GiB
sha256:8888                                             application/vnd.docker...v2+json sha256:5555 1.0 GiB
"""


def test_old_generations_go_with_their_id_refs_and_the_kept_and_cluster_images_stay():
    keep = {"docker.io/invfold-test/invfold-runtime:2787b4c1b730-cpu"}
    assert stale_node_images(LISTING, keep) == [
        "docker.io/invfold-test/invfold-runtime:1111aaaa2222-cpu",
        "sha256:7777",
        "sha256:8888",
    ]


def test_nothing_goes_when_every_generation_is_kept():
    keep = {
        "docker.io/invfold-test/invfold-runtime:2787b4c1b730-cpu",
        "docker.io/invfold-test/invfold-runtime:1111aaaa2222-cpu",
    }
    assert stale_node_images(LISTING, keep) == ["sha256:8888"]
