"""The import graph of asr_transformer: no cycles, and no module imports one of a higher layer.

Every module is parsed with `ast` (nothing is imported), and every `import` counts, those inside functions
too: a lazy import delays a dependency, it does not remove it. The one way around a rule is an entry in
EXEMPT with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "asr_transformer"
SOURCE = Path(__file__).resolve().parents[1] / PACKAGE

# The layers, lowest first. A module may import modules of its own layer or of a lower one, never of a higher
# one. A name is a top-level module or a sub-package of asr_transformer (all its modules), "" the package's
# own __init__.py (whose lazy `Recognizer` makes it the top).
LAYERS = [
    # imports nothing of the project, or only its neighbours here: errors, atomic files, text normalization, how
    # numbers are written, the fixed token ids, the subsampling's frame arithmetic, malloc tunables, device choice,
    # CPU threads, progress bars
    ["errors", "fileio", "text", "numerals", "tokens", "frames", "malloc", "device", "threads", "progress"],
    # option dataclasses, the checkpoint file format (of training checkpoints and model packages), WER scoring
    ["config", "checkpoint_io", "scoring"],
    ["data"],  # manifests, audio, features, tokenizers, training batches, corpus importers
    ["model"],  # the network, one box of the figure per file
    ["decode"],  # every search, and the n-gram LMs
    # the one-file model package: config, tokenizer, weights (model/), LMs (decode/ngram.py). Below train/:
    # training starts from a package (train.init_from) and writes what the package records (data.json).
    ["package"],
    ["train"],
    # a package (or its export) put to use: the recognizer, files of any length, streams, the export and its
    # runtime, result files and checked manifests
    ["inference"],
    # tools on packages: describe, import Whisper, build LMs, plot, models by name (imported Whisper checkpoints)
    ["info", "whisper", "lm_build", "plots", "hub"],
    ["server"],  # `asr serve`: the recognizers behind OpenAI's transcription API
    ["cli", "__main__", ""],  # the command line, the `asr` entry point, the package facade
]

# (importer, imported) → why this import may go against the rules. Empty: every import follows them.
EXEMPT: dict[tuple[str, str], str] = {}


def module_files(source: Path = SOURCE) -> dict[str, Path]:
    """Dotted module name → file, for every module of the package."""
    modules = {}
    for path in sorted(source.rglob("*.py")):
        parts = (PACKAGE,) + path.relative_to(source).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` imports anywhere in its file (inside functions too)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                package = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join(package + ([base] if base else []))
            # `from package import module` imports that module; `from module import name`, the module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a module: that module
                target = target.rpartition(".")[0]
            if target.split(".")[0] == PACKAGE and target != name:
                found.add(target)
    return found


def import_graph(source: Path = SOURCE) -> dict[str, set[str]]:
    modules = module_files(source)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def layer_of(module: str, layers=LAYERS) -> int | None:
    """The index of the module's layer, by its top-level name under the package; None when undeclared."""
    top = module.split(".")[1] if "." in module else ""
    return next((i for i, names in enumerate(layers) if top in names), None)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the import cycles."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward_imports(graph: dict[str, set[str]], layers=LAYERS, exempt=EXEMPT) -> list[str]:
    """'importer (layer) → imported (higher layer)' for every import against the order, not exempted."""
    bad = []
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        low, high = layer_of(importer, layers), layer_of(imported, layers)
        if low is not None and high is not None and high > low and (importer, imported) not in exempt:
            bad.append(f"{importer} (layer {low}: {layers[low]}) imports {imported} (layer {high}: {layers[high]})")
    return bad


def test_every_module_has_a_layer():
    undeclared = sorted(m for m in import_graph() if layer_of(m) is None)
    assert not undeclared, f"modules in no layer of LAYERS (tests/test_imports.py): add them: {undeclared}"


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_no_upward_imports():
    bad = upward_imports(import_graph())
    assert not bad, "imports against the layer order of tests/test_imports.py:\n" + "\n".join(bad)


def test_exemptions_are_still_needed():
    graph = import_graph()
    stale = [pair for pair in EXEMPT if pair[1] not in graph.get(pair[0], ())]
    assert not stale, f"EXEMPT entries for imports that no longer exist: {stale}"


def test_the_checks_see_lazy_relative_and_upward_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    for rel, text in {
        "__init__.py": "",
        "tokens.py": "def f():\n    from asr_transformer.data import loader  # lazy, and upward\n",
        "data/__init__.py": "",
        "data/loader.py": "from . import tokenizer\n",
        "data/tokenizer.py": "import asr_transformer.data.loader\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    graph = import_graph(pkg)
    assert graph[f"{PACKAGE}.tokens"] == {f"{PACKAGE}.data.loader"}
    assert graph[f"{PACKAGE}.data.loader"] == {f"{PACKAGE}.data.tokenizer"}
    assert cycles(graph) == [[f"{PACKAGE}.data.loader", f"{PACKAGE}.data.tokenizer"]]
    assert [line.split(" (")[0] for line in upward_imports(graph)] == [f"{PACKAGE}.tokens"]
