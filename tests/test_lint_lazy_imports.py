"""scripts/lint_lazy_imports.py: an import inside a function is for a heavy module only, and no
heavy module is imported at module level on the path of `invfold --help`."""

from __future__ import annotations

from scripts.lint_lazy_imports import ALLOWLIST, CliModules, cli_modules, library_files, lint

NO_CLI = CliModules(help=set(), parsers=set())
HEAVY_MODEL = {
    "components/model/__init__.py": "",
    "components/model/network.py": "import torch\n\n\nclass Network:\n    pass\n",
}


def test_the_library_passes():
    assert lint(library_files(), ALLOWLIST.read_text(), cli_modules()) == []


def test_a_stdlib_import_inside_a_function_is_rejected():
    files = {
        "src/invfold/report.py": '"""Reports."""\n\n\ndef table(rows):\n    import json\n\n    return json(rows)\n'
    }
    assert lint(files, "", NO_CLI) == [
        "src/invfold/report.py:5: `json` is imported inside table() but is not heavy: import it at the top "
        "of the module (or list it in lazy_imports_allowlist.txt with the reason)"
    ]


def test_a_light_invfold_module_inside_a_method_is_rejected():
    files = {
        "src/invfold/errors.py": "class InvfoldError(Exception):\n    pass\n",
        "pipelines/summary.py": "class Summary:\n    def fail(self):\n        from invfold.errors import Error\n",
    }
    [problem] = lint(files, "", NO_CLI)
    assert problem.startswith("pipelines/summary.py:3: `invfold.errors` is imported inside Summary.fail()")


def test_a_heavy_library_inside_a_function_is_accepted():
    files = {
        "components/export/runtime.py": "def session(path):\n    import onnxruntime as ort\n\n    return ort\n",
        "src/invfold/plots.py": "def plot():\n    from matplotlib import pyplot\n",
    }
    assert lint(files, "", NO_CLI) == []


def test_an_invfold_module_that_loads_a_heavy_library_is_heavy_too():
    files = {
        **HEAVY_MODEL,
        "components/model/io.py": "from invfold.components.model.network import Network\n",
        "components/model/cli.py": "def run():\n    from invfold.components.model.io import Network\n",
    }
    assert lint(files, "", NO_CLI) == []


def test_an_allowlisted_import_is_accepted_and_a_stale_or_unexplained_entry_is_not():
    files = {
        "src/invfold/storage.py": "",
        "src/invfold/errors.py": "def shown(value):\n    from invfold import storage\n",
    }
    entry = "src/invfold/errors.py shown invfold.storage: storage imports this module\n"
    assert lint(files, "# header\n" + entry, NO_CLI) == []
    stale = lint({"src/invfold/storage.py": "", "src/invfold/errors.py": ""}, entry, NO_CLI)
    assert stale == [
        "scripts/lazy_imports_allowlist.txt: `src/invfold/errors.py shown invfold.storage` matches no import "
        "inside a function"
    ]
    unexplained = lint(files, "src/invfold/errors.py shown invfold.storage\n", NO_CLI)
    assert unexplained[0] == "scripts/lazy_imports_allowlist.txt:1: expected `path function module: reason`"


def test_a_kfp_components_imports_stay_inside_it():
    files = {
        "components/prep/component.py": (
            "from kfp import dsl\n\n\n@dsl.component(base_image='x')\ndef prep_op(out: str):\n"
            "    import json\n\n    from invfold.components.prep.config import PrepConfig\n"
        )
    }
    assert lint(files, "", NO_CLI) == []


def test_an_import_that_keeps_a_module_out_of_help_is_accepted_and_one_help_loads_anyway_is_not():
    files = {
        "src/invfold/options.py": "",
        "components/prep/cli.py": (
            "def run(args):\n    from invfold.components.prep.run import run\n    from invfold.options import option\n"
        ),
        "components/prep/run.py": "",
    }
    cli = CliModules(help={"invfold.components.prep.cli", "invfold.options"}, parsers=set())
    [problem] = lint(files, "", cli)
    assert problem.startswith("components/prep/cli.py:3: `invfold.options` is imported inside run()")


def test_a_heavy_import_at_module_level_on_the_cli_path_is_rejected():
    files = {
        **HEAVY_MODEL,
        "components/design/cli.py": "import torch\n",
        "components/design/config.py": "from invfold.components.model.network import Network\n",
    }
    cli = CliModules(
        help={"invfold.components.design.cli"},
        parsers={"invfold.components.design.cli", "invfold.components.design.config", "torch"},
    )
    assert lint(files, "", cli) == [
        "components/design/cli.py:1: `torch` is imported at module level, and `invfold --help` loads "
        "invfold.components.design.cli: import it inside the function that needs it",
        "components/design/config.py:1: `invfold.components.model.network` (which loads torch) is imported at "
        "module level, and `invfold --help` loads invfold.components.design.config: import it inside the "
        "function that needs it",
        "`invfold --help` loads torch",
    ]


def test_a_heavy_import_off_the_cli_path_is_fine_at_module_level():
    files = {**HEAVY_MODEL, "components/train/trainer.py": "import torch\n"}
    assert lint(files, "", CliModules(help={"invfold.cli"}, parsers={"invfold.cli"})) == []
