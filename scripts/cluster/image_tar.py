"""Write a one-file container image as a `docker save` archive that `ctr images import` loads.

Usage: image_tar.py BINARY REF OUT.tar [NAME]. The image holds BINARY as /NAME (default pause), its
entrypoint, run as user 65535, so the cluster needs no registry for its sandbox image or its
object store."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile


def main(binary: str, ref: str, out: str, name: str = "pause") -> None:
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tar.gettarinfo(binary, arcname=name)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        with open(binary, "rb") as fh:
            tar.addfile(info, fh)
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": [f"/{name}"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "scripts/cluster/image_tar.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": ["layer.tar"]}]
    with tarfile.open(out, mode="w") as tar:
        for name, data in (
            ("layer.tar", layer_bytes),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main(*sys.argv[1:])
