"""The package's shape, read from its sources, counting every import node (inside functions too):
no import circle; each foreign system touched by its one adapter; the core pure; adapters never
importing the API or each other; the report reading only the core. See docs/architecture.md."""

import ast
import os

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "autotune_guard")

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
# layer -> the modules of ours it may import (prefixes); api, activation and _boot may import anything.
ALLOWED = {
    "core": ("core",),
    "runtime": ("core",),
    "evidence": ("core", "runtime", "evidence"),  # the package and its paths and signals modules
    "adapters": ("core", "runtime", "adapters._patching"),
    "report": ("core", "report", "", "adapters.redis_tables"),  # "": the package root, for its __version__ (it
    # imports nothing); adapters.redis_tables: `report show/merge/store-* redis://...` (docs/shared-store.md)
    "_watch": (),
}


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


def test_each_layer_imports_only_what_is_below_it():
    offenders = []
    for module, (is_package, tree) in MODULES.items():
        layer = module.split(".")[0]
        allowed = ALLOWED.get(layer)
        if layer == "adapters" and module.count(".") >= 1:
            own = ".".join(module.split(".")[:2])  # an adapter may import its own package
            allowed = allowed + (own,)
        if allowed is None:
            continue
        for target in _ours(module, is_package, tree):
            if target == module or (layer == "adapters" and target == "adapters"):
                continue
            if not any(_within(target, prefix) for prefix in allowed):
                offenders.append(f"{module} imports {target or 'autotune_guard'}")
    assert not offenders, offenders


def test_the_core_imports_only_the_standard_library():
    stdlib_or_dotenv = {"dotenv", "dotenv.parser"}
    offenders = []
    for module, (_, tree) in MODULES.items():
        if module.split(".")[0] == "core":
            offenders += [f"{module} uses {name}" for name in _foreign(tree)
                          if name.split(".")[0] in ("triton", "torch", "wrapt") or
                          (name.startswith("dotenv") and name not in stdlib_or_dotenv)]
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
    assert {"core", "runtime", "evidence", "adapters", "report", "api", "_boot"} <= layers
    assert {"adapters.triton", "adapters.inductor", "adapters.distributed", "adapters._patching"} <= set(MODULES)
