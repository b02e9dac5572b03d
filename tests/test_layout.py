"""The package's shape, read from its sources, counting every import node (inside functions too):
no import circle; each foreign system touched by its one adapter; the core pure; every root module
in a layer, importing only what its layer may; adapters never importing the API or each other; the
report reading only the core. And the house's limits, measured by scripts/house_metrics.py: no
module over 400 lines, no function over 60, Triton's internals named in one module, fewer than 10
module-level mutable names outside the Guard. See docs/architecture.md."""

import ast
import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "autotune_guard")

# foreign module prefix -> the package of ours that may import it (or look it up in sys.modules)
ADAPTERS = {
    "triton": "adapters.triton",
    "torch._inductor": "adapters.inductor",
    "torch._higher_order_ops": "adapters.inductor",
    "torch._dynamo": "adapters.inductor",
    "torch.distributed": "adapters.distributed",
    "redis": "adapters.redis_tables",
}
# Plain torch (tensors, the version, the deterministic flag): adapters only.
TORCH_USERS = ("adapters.torch_flags", "adapters.distributed", "adapters.inductor")
ANYTHING = None
# Every root module and package of ours ("" is the package's __init__): (its layer, the modules of
# ours it may import, as prefixes; ANYTHING for the top layer). From the top down: top; the writers
# (evidence files, table growth, the uncaught-error line); adapters; the runtime layer (the Guard,
# and the decision engine the adapters' families implement); core; and beside them report and _watch.
ALLOWED = {
    "": ("top", ANYTHING),
    "api": ("top", ANYTHING),
    "activation": ("top", ANYTHING),
    "_boot": ("top", ANYTHING),
    # the package and its paths, signals (whose process hooks go through the one patching idiom), journal
    "evidence": ("writers", ("core", "runtime", "evidence", "_patching")),
    "adapters": ("adapters", ("core", "runtime", "deciding", "_patching")),  # + its own package
    "deciding": ("runtime", ("core", "runtime", "deciding")),
    "runtime": ("runtime", ("core",)),
    "_patching": ("runtime", ()),  # the one patching idiom: standard library only, below every user of it
    "core": ("core", ("core",)),
    "report": ("report", ("core", "report", "", "adapters.redis_tables")),  # "": the package root, for its
    # __version__ (it imports nothing); adapters.redis_tables: `report show/merge/store-* redis://...`
    "_watch": ("watch", ()),
}
# Beyond the standard library, the core may import python-dotenv where the env file is read.
CORE_EXTRAS = {"core.envfile": ("dotenv",)}


def _house_metrics():
    spec = importlib.util.spec_from_file_location("house_metrics", os.path.join(REPO, "scripts", "house_metrics.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


house = _house_metrics()
SOURCES = house.modules(PACKAGE)  # parsed once for the limits below


def _modules():
    """(module name, parsed source) of every module; a subpackage's modules as ``package.module``,
    a package's own ``__init__`` as the package name."""
    for root, _, names in sorted(os.walk(PACKAGE)):
        package = os.path.relpath(root, PACKAGE).replace(os.sep, ".")
        for name in sorted(names):
            if name.endswith(".py"):
                stem = name[:-3]
                if stem == "__init__":
                    module = "" if package == "." else package
                else:
                    module = stem if package == "." else f"{package}.{stem}"
                with open(os.path.join(root, name)) as f:
                    yield module, name == "__init__.py", ast.parse(f.read())


MODULES = {module: (is_package, tree) for module, is_package, tree in _modules()}


def _ours(module, is_package, tree):
    """Every module of ours this source imports, anywhere in it."""
    here = module.split(".") if module else []
    package = here if is_package else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
            base = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}".lstrip(".")
                yield candidate if candidate in MODULES else base
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("autotune_guard"):
            yield node.module[len("autotune_guard."):] if "." in node.module else ""
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("autotune_guard"):
                    yield alias.name[len("autotune_guard."):] if "." in alias.name else ""


def _foreign(tree):
    """Every absolute module this source imports, anywhere, and every ``sys.modules`` key it names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, (ast.Subscript, ast.Call)):
            target = node.value if isinstance(node, ast.Subscript) else node.func
            if ast.unparse(target).startswith("sys.modules"):
                args = [node.slice] if isinstance(node, ast.Subscript) else node.args[:1]
                yield from (a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str))


def _within(module, prefix):
    return prefix == "" and module == "" or module == prefix or module.startswith(prefix + ".")


def test_each_foreign_system_is_touched_by_its_adapter_only():
    offenders = []
    for module, (_, tree) in MODULES.items():
        for name in _foreign(tree):
            for prefix, owner in ADAPTERS.items():
                if (name == prefix or name.startswith(prefix + ".")) and not _within(module, owner):
                    offenders.append(f"{module} uses {name} (only {owner} may)")
            if name == "torch" and not any(_within(module, owner) for owner in TORCH_USERS):
                offenders.append(f"{module} uses torch (only {', '.join(TORCH_USERS)} may)")
    assert not offenders, offenders


def test_every_root_module_and_package_has_a_layer():
    roots = {module.split(".")[0] for module in MODULES}
    assert not roots - set(ALLOWED), f"not in test_layout.ALLOWED (give each a layer): {sorted(roots - set(ALLOWED))}"
    assert not set(ALLOWED) - roots, f"in ALLOWED but not in the package: {sorted(set(ALLOWED) - roots)}"


def test_each_layer_imports_only_what_is_below_it():
    offenders = []
    for module, (is_package, tree) in MODULES.items():
        root = module.split(".")[0]
        layer, allowed = ALLOWED.get(root, (None, ()))
        if allowed is ANYTHING:
            continue
        if root == "adapters" and module.count(".") >= 1:
            own = ".".join(module.split(".")[:2])  # an adapter may import its own package
            allowed = allowed + (own,)
        for target in _ours(module, is_package, tree):
            if target == module or (root == "adapters" and target == "adapters"):
                continue
            if not any(_within(target, prefix) for prefix in allowed):
                offenders.append(f"{module} ({layer}) imports {target or 'autotune_guard'}")
    assert not offenders, offenders


def test_the_core_imports_only_the_standard_library():
    """A whitelist: the standard library as this interpreter names it, python-dotenv where the
    env file is read, and the core's own modules."""
    offenders = []
    for module, (_, tree) in MODULES.items():
        if module.split(".")[0] == "core":
            extras = CORE_EXTRAS.get(module, ())
            offenders += [f"{module} uses {name}" for name in _foreign(tree)
                          if name.split(".")[0] not in sys.stdlib_module_names and name.split(".")[0] not in extras
                          and not _within(name, "autotune_guard.core")]
    assert not offenders, offenders


def test_no_import_circle_counting_imports_inside_functions():
    imports = {module: {t for t in _ours(module, is_package, tree) if t != module}
               for module, (is_package, tree) in MODULES.items()}

    def circle_from(start, path):
        for nxt in imports.get(start, ()):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            found = circle_from(nxt, path + [nxt])
            if found:
                return found
        return None

    circles = [c for c in (circle_from(m, [m]) for m in imports) if c]
    assert not circles, circles


def test_the_layers_exist():
    layers = {module.split(".")[0] for module in MODULES}
    assert {"core", "runtime", "deciding", "evidence", "adapters", "report", "api", "_boot"} <= layers
    assert {"adapters.triton", "adapters.inductor", "adapters.distributed", "_patching"} <= set(MODULES)


# The house's limits (issue 33), measured as scripts/house_metrics.py measures them.
def test_no_module_is_over_400_lines():
    assert not house.long_modules(SOURCES), house.long_modules(SOURCES)


def test_a_module_over_350_lines_says_why_at_its_top():
    """Issue 60: past 350 lines a module names the reason it stays one (``Over 350 lines: ...`` in its docstring)."""
    from pathlib import Path

    unexplained = []
    for path in sorted(Path(PACKAGE).rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 350 and "Over 350 lines:" not in (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(f"{path.relative_to(REPO)}: {text.count(chr(10))} lines")
    assert not unexplained, unexplained


def test_no_function_is_over_60_lines():
    assert not house.long_functions(SOURCES), house.long_functions(SOURCES)


def test_only_the_seam_reads_an_autotuners_fields_or_frames():
    found = {m: lines for m, lines in house.autotuner_reads(SOURCES).items() if m not in house.NOT_TRITONS}
    assert found == {}, f"only {house.SEAM} reads an autotuner's fields or frames: {found}"
    # the check sees a read it must flag, and leaves the seam's own alone
    planted = "def launch(autotuner, state):\n    frame = sys._getframe(1)\n    return state.autotuner.cache, autotuner.configs\n"
    parsed = {m: (None, planted, ast.parse(planted), False) for m in ("adapters.triton.launch", house.SEAM)}
    assert house.autotuner_reads(parsed) == {"adapters.triton.launch": [2, 3]}


def test_only_the_inductor_seam_reads_inductors_internals():
    found = house.inductor_reads(SOURCES)
    assert found == {}, f"only {house.INDUCTOR_SEAM} reads Inductor's internals: {found}"
    assert house.NOT_TRITONS == ("_watch",)  # the Inductor adapter is checked, not exempted
    # any receiver's field, a getattr's or __dict__'s string, an import; Triton-shared names (``fn``,
    # ``config``) only inside the Inductor adapter, and not as a method call; not in a docstring
    planted = ('"""launchers and _cached_launcher, in prose."""\n'
               "from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table\n"
               "def keep(kernel, chosen, tuning):\n"
               "    kernel.launchers = [chosen]\n"
               "    free = getattr(kernel, '_release_static_launchers_except', None)\n"
               "    cached = '_cached_launcher' in kernel.__dict__\n"
               "    return chosen.config, kernel.fn, tuning.keys(), free, cached\n"
               "def key_names(tuning):\n"
               "    return tuning.keys\n")
    planted_in = ("adapters.inductor.step", "adapters.inductor.names", "adapters.triton.guarded", house.INDUCTOR_SEAM)
    parsed = {m: (None, planted, ast.parse(planted), False) for m in planted_in}
    assert house.inductor_reads(parsed) == {"adapters.inductor.step": [2, 4, 5, 6, 7, 9],
                                            "adapters.inductor.names": [2, 4, 5, 6, 7],  # TuningKey's keys
                                            "adapters.triton.guarded": [2, 4, 5, 6]}
    assert all(why for lookalikes in house.INDUCTOR_LOOKALIKES.values() for why in lookalikes.values())


def test_tritons_internals_are_named_in_one_module_at_most():
    found = house.runtime_triton_modules(house.triton_internals(SOURCES))
    assert len(found) <= house.MAX_TRITON_MODULES, f"{len(found)} modules name {house.TRITON_INTERNALS}: {found}"
    assert found == ["adapters.triton.seam"], found


def test_fewer_than_10_module_level_mutable_names_outside_the_guard():
    names = house.mutable_names(SOURCES)
    assert len(names) <= house.MAX_MUTABLE_NAMES, (
        f"{len(names)} module-level mutable names (limit: under 10): "
        + ", ".join(f"{m or '__init__'}.{n}" for m, n in names))


def test_the_house_metrics_see_what_they_are_meant_to(tmp_path):
    """The counter itself, on a small package: each rule found, each exception left out."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "runtime.py").write_text("class Guard:\n    pass\n_guard = Guard()\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "state.py").write_text(
        "import logging, re, threading\n"
        "logger = logging.getLogger('x')\n"
        "PATTERN = re.compile('a')\n"
        "LIMIT = 3\n"
        "_lock = threading.Lock()\n"
        "_seen = set()\n"
        "_table = {}\n"
        "_flag = False\n"
        "_untouched = []\n"
        "class Box:\n"
        "    def __init__(self):\n        self.n = 0\n"
        "    def bump(self):\n        self.n += 1\n"
        "class Frozen:\n"
        "    def __init__(self):\n        self.n = 0\n"
        "BOX = Box()\n"
        "FROZEN = Frozen()\n"
        "def f(k):\n"
        "    global _flag\n"
        "    _flag = True\n"
        "    _seen.add(k)\n"
        "    with _lock:\n        return len(_untouched) + LIMIT\n")
    (package / "sub" / "other.py").write_text("from .state import _table\nfrom . import state\n"
                                               "def g():\n    _table['k'] = 1\n    state.PATTERN = None\n")
    names = {name for _, name in house.mutable_names(house.modules(str(package)))}
    assert names == {"_seen", "_table", "_flag", "BOX", "PATTERN"}, names
