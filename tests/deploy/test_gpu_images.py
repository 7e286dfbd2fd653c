"""The GPU variant of the images (`scripts/build_images.sh --variant gpu`), built here from the same
Debian base as the CPU variant, with CUDA's compiler from PyPI, and checked inside with no GPU:
torch's CUDA 13.0 and its libraries load, Horovod is built with NCCL against torch's own NCCL,
DeepSpeed's fused optimizers are compiled for the generations images/bases/gpu.args names, and the
chart's GPU values and the compiled pipeline name these images.

What no machine here can check (no GPU): that the kernels run. bench/gpu_smoke.sh does, on a lent
GPU machine (bench/README.md, "GPU smoke")."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.support.deploy_tools import CHART, REPO, documents, helm_template, pod_specs, run
from tests.support.docker_engine import GPU_IMAGES

pytestmark = [pytest.mark.timeout(3600), pytest.mark.images, pytest.mark.slow]
# images/bases/gpu.args: TORCH_CUDA_ARCH_LIST=8.0;9.0+PTX, HOROVOD_BUILD_CUDA_CC_LIST=80,90
COMPILED_FOR = {("sass", 80), ("sass", 90), ("ptx", 90)}
FUSED_OPS = ("fused_adam", "fused_lamb", "fused_lion")
TRAINING_IMAGES = ("runtime", "mpi", "deepspeed", "horovod")


def python_in(images, name: str, code: str, *env: str) -> dict:
    """Run `code` with the image's Python, offline, tests/support mounted (for fatbin.py); its last
    stdout line is JSON."""
    args = ["run", "--rm", "--network", "none", "-v", f"{REPO / 'tests' / 'support'}:/support:ro"]
    for pair in env:
        args += ["-e", pair]
    out = images.engine.docker(*args, images[name], "python", "-c", code, timeout=300).stdout
    return json.loads(out.strip().splitlines()[-1])


CUDA_LIBRARIES = """
import ctypes, glob, json, os, sysconfig, torch
site = sysconfig.get_path("purelib")
found = {}
for name in ("libcudart.so.13", "libnccl.so.2", "libcudnn.so.9"):
    paths = glob.glob(f"{site}/nvidia/**/{name}", recursive=True)
    ctypes.CDLL(paths[0])
    found[name] = [os.path.relpath(p, site) for p in paths]
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "uid": os.getuid(),
                  "nccl": list(torch.cuda.nccl.version()), "cudnn": torch.backends.cudnn.version(),
                  "libraries": found}))
"""


@pytest.mark.parametrize("name", TRAINING_IMAGES)
def test_torch_reports_cuda_13_and_loads_cudart_nccl_and_cudnn_from_the_image(gpu_images, name):
    got = python_in(gpu_images, name, CUDA_LIBRARIES)
    assert got["torch"].endswith("+cu130") and got["cuda"] == "13.0", got
    # one copy of each, where torch's wheels put them (nvidia/cu13, nvidia/nccl, nvidia/cudnn)
    assert got["libraries"] == {
        "libcudart.so.13": ["nvidia/cu13/lib/libcudart.so.13"],
        "libnccl.so.2": ["nvidia/nccl/lib/libnccl.so.2"],
        "libcudnn.so.9": ["nvidia/cudnn/lib/libcudnn.so.9"],
    }, got
    assert got["nccl"][0] == 2 and got["cudnn"] >= 90000, got
    assert got["uid"] == 10001, f"{name} runs as uid {got['uid']}, not the unprivileged 10001"


def test_every_gpu_image_runs_as_the_unprivileged_user(gpu_images):
    assert {name: gpu_images.user(name) for name in GPU_IMAGES} == dict.fromkeys(GPU_IMAGES, "10001:10001")


HOROVOD = """
import json, sys, torch, horovod.torch as hvd
sys.path.insert(0, "/support")
from fatbin import gpu_code
import horovod.torch.mpi_lib_v2 as ext
maps = {line.split()[-1] for line in open("/proc/self/maps") if "libnccl" in line}
major, minor, patch = torch.cuda.nccl.version()
print(json.dumps({"nccl_built": hvd.nccl_built(), "cuda_built": hvd.cuda_built(), "mpi_built": hvd.mpi_built(),
                  "gloo_built": hvd.gloo_built(), "torch_nccl": major * 10000 + minor * 100 + patch,
                  "nccl_mapped": sorted(maps), "code": sorted(gpu_code(open(ext.__file__, "rb").read()))}))
"""


def test_horovod_is_built_with_nccl_against_the_nccl_torch_loads(gpu_images):
    got = python_in(gpu_images, "horovod", HOROVOD)
    assert got["cuda_built"] and got["mpi_built"] and got["gloo_built"], got
    # nccl_built() is the NCCL version the build compiled against (NCCL_VERSION_CODE): torch's own
    assert got["nccl_built"] == got["torch_nccl"], got
    assert len(got["nccl_mapped"]) == 1 and got["nccl_mapped"][0].endswith("/nvidia/nccl/lib/libnccl.so.2"), got
    assert {tuple(c) for c in got["code"]} == COMPILED_FOR, got


DEEPSPEED = """
import importlib, json, subprocess, sys, sysconfig, torch
sys.path.insert(0, "/support")
from fatbin import gpu_code
import deepspeed.ops
from deepspeed.git_version_info import accelerator_name, installed_ops
code = {}
for op, module in (("fused_adam", "adam"), ("fused_lamb", "lamb"), ("fused_lion", "lion")):
    ext = importlib.import_module(f"deepspeed.ops.{module}.{op}_op")  # loads: links resolve in the image
    code[op] = sorted(gpu_code(open(ext.__file__, "rb").read()))
torch_lib = f"{sysconfig.get_path('purelib')}/torch/lib/libtorch_cuda.so"
report = subprocess.run(["ds_report"], capture_output=True, text=True, check=True).stdout
print(json.dumps({"built_for": accelerator_name, "installed": installed_ops,
                  "compatible": deepspeed.ops.__compatible_ops__, "code": code, "report": report,
                  "torch_code": sorted(gpu_code(open(torch_lib, "rb").read())),
                  "torch_arch_list": torch.cuda.get_arch_list()}))
"""


@pytest.fixture(scope="module")
def deepspeed_ops(gpu_images) -> dict:
    # On a GPU node DeepSpeed detects CUDA itself; here it has to be told.
    return python_in(gpu_images, "deepspeed", DEEPSPEED, "DS_ACCELERATOR=cuda")


def test_the_fat_binary_reading_agrees_with_torch_on_its_own_library(deepspeed_ops):
    """What the checks below rely on: fatbin.py finds in libtorch_cuda.so machine code for every
    architecture torch says it was built for (the library also carries kernels its bundled
    libraries compiled for more, such as sm_89), and nothing that is no architecture."""
    listed = {int(arch.removeprefix("sm_")) for arch in deepspeed_ops["torch_arch_list"] if arch.startswith("sm_")}
    found = {arch for kind, arch in deepspeed_ops["torch_code"] if kind == "sass"}
    assert listed and listed <= found, (listed, found)
    assert {kind for kind, _ in deepspeed_ops["torch_code"]} <= {"sass", "ptx"}
    assert all(50 <= arch <= 130 for _, arch in deepspeed_ops["torch_code"]), deepspeed_ops["torch_code"]


def test_deepspeed_has_its_fused_optimizers_compiled_for_ampere_and_hopper(deepspeed_ops):
    assert deepspeed_ops["built_for"] == "cuda"
    for op in FUSED_OPS:
        assert deepspeed_ops["installed"].get(op), f"{op} is not prebuilt: {deepspeed_ops['installed']}"
        assert deepspeed_ops["compatible"].get(op), op
        assert {tuple(c) for c in deepspeed_ops["code"][op]} == COMPILED_FOR, (op, deepspeed_ops["code"][op])
    # ds_report, as a user runs it: each one installed and compatible, the wheel built for this torch
    report = re.sub(r"\x1b\[[0-9;]*m", "", deepspeed_ops["report"])  # its colours
    rows = {
        op: (installed, compatible)
        for op, installed, compatible in re.findall(r"^(\w+) \.+ \[(\w+)\] \.+ \[(\w+)\]", report, re.MULTILINE)
    }
    assert {op: rows.get(op) for op in FUSED_OPS} == dict.fromkeys(FUSED_OPS, ("YES", "OKAY")), report
    assert rows["cpu_adam"] == ("NO", "OKAY"), "the parsing above reads a row that is not installed as one"
    assert re.search(r"deepspeed wheel compiled w\. \.+ torch 2\.13, cuda 13\.0$", report, re.MULTILINE), report


@pytest.mark.parametrize("name", ["runtime", "mpi"])
def test_the_gpu_variant_carries_the_cpu_variants_packages(gpu_images, cpu_images, name):
    """One base for both variants: the same Python and Debian packages; only the compiled images differ."""
    listing = "pip list --format=freeze --disable-pip-version-check && dpkg-query -W"
    cpu, gpu = (
        images.engine.docker("run", "--rm", "--network", "none", images[name], "bash", "-c", listing).stdout
        for images in (cpu_images, gpu_images)
    )
    assert "torch==2.13.0" in gpu.splitlines() and cpu == gpu


def test_the_charts_gpu_values_and_the_compiled_pipeline_name_these_images(gpu_images, tmp_path):
    """Every invfold image a pod of the GPU rendering runs is one built here (the chart's own
    PostgreSQL is upstream's); every step of the compiled pipeline runs the runtime image."""
    registry, tag = "invfold-test", gpu_images.tag
    rendered = documents(
        helm_template(
            "-f",
            str(CHART / "values-gpu.yaml"),
            "--set",
            f"images.registry={registry}",
            "--set-string",
            f"images.tag={tag}",
        )
    )
    named = {
        container["image"]
        for doc in rendered
        for _, spec in pod_specs(doc, doc["kind"])
        for container in spec["containers"] + spec.get("initContainers", [])
    }
    ours = {image for image in named if "/invfold-" in image}
    assert ours == {gpu_images[name] for name in ("runtime", "deepspeed", "horovod", "mlflow")}, named
    out = tmp_path / "pipeline.yaml"
    run([str(REPO / ".venv" / "bin" / "invfold"), "compile", "--registry", registry, "--tag", tag, "--out", str(out)])
    executors = next(yaml.safe_load_all(out.read_text()))["deploymentSpec"]["executors"].values()
    assert {e["container"]["image"] for e in executors} == {gpu_images["runtime"]}
