"""The GPU code a shared library carries: the (kind, architecture) of each entry of its CUDA fat
binaries, read from their headers (no CUDA tool needed: the images carry no cuobjdump).

A fat binary starts with a 16-byte header (magic 0xBA55ED50, version 1, header size, payload size);
each entry then has its own header: kind (1 PTX, 2 ELF machine code), header size, padded payload
size, and the SM version at byte 28, e.g. 90 for sm_90. Entry payloads may be compressed; their
headers never are. tests/deploy/test_gpu_images.py checks this reading against torch's own
`torch.cuda.get_arch_list()` on libtorch_cuda.so before trusting it."""

from __future__ import annotations

import struct

MAGIC = struct.pack("<I", 0xBA55ED50)
KINDS = {1: "ptx", 2: "sass"}


def gpu_code(data: bytes) -> set[tuple[str, int]]:
    """{("sass", 80), ("ptx", 90), ...} over every fat binary in `data` (an ELF shared library)."""
    found = set()
    at = data.find(MAGIC)
    while at >= 0:
        _, version, header_size, size = struct.unpack_from("<IHHQ", data, at)
        end = at + header_size + size
        if version == 1 and header_size == 16 and end <= len(data):
            entry = at + header_size
            while entry < end:
                kind, _, entry_header, padded = struct.unpack_from("<HHIQ", data, entry)
                found.add((KINDS.get(kind, str(kind)), struct.unpack_from("<I", data, entry + 28)[0]))
                entry += entry_header + padded
        at = data.find(MAGIC, at + 4)
    return found
