"""The package's shape, read from its sources: no import loop between its modules, each foreign
system's internals touched by one adapter module only, and the pure modules touching neither
Triton nor torch (see "Architecture" in the README)."""

import ast
import os

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "autotune_guard")

# foreign module prefix -> the one module of ours that may import it (or look it up in sys.modules)
ADAPTERS = {
    "triton": "interception",
    "torch._inductor": "inductor",
    "torch._higher_order_ops": "inductor",
    "torch._dynamo": "inductor",
    "torch.distributed": "distributed",
}

# Plain data and rules: what tests drive without Triton or torch, and what the adapters call.
PURE = ("state", "choices", "policy", "selection", "pinning", "files", "consensus", "verification", "report")
# The one look a pure module takes: policy reads torch's deterministic flag, from sys.modules and
# only when the program imported torch itself (it never imports torch).
LOOKS = {("policy", "torch")}


def _modules():
    """(module name, parsed source) of every module; a subpackage's modules as ``package.module``."""
    for root, _, names in sorted(os.walk(PACKAGE)):
        package = os.path.relpath(root, PACKAGE).replace(os.sep, ".")
        for name in sorted(names):
            if name.endswith(".py"):
                module = name[:-3] if package == "." else f"{package}.{name[:-3]}"
                with open(os.path.join(root, name)) as f:
                    yield module, ast.parse(f.read())


def _foreign_names(tree):
    """Every absolute module this source imports, anywhere, and every ``sys.modules`` key it names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Subscript) or isinstance(node, ast.Call):
            target = node.value if isinstance(node, ast.Subscript) else node.func
            text = ast.unparse(target)
            if text.startswith("sys.modules"):
                args = [node.slice] if isinstance(node, ast.Subscript) else node.args[:1]
                for arg in args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        yield arg.value


def test_each_foreign_system_is_touched_by_one_module():
    offenders = []
    for module, tree in _modules():
        for name in _foreign_names(tree):
            for prefix, owner in ADAPTERS.items():
                if (name == prefix or name.startswith(prefix + ".")) and module != owner:
                    offenders.append(f"{module}.py uses {name} (only {owner}.py may)")
    assert not offenders, offenders


def test_pure_modules_import_neither_triton_nor_torch():
    offenders = []
    for module, tree in _modules():
        if module.split(".")[0] in PURE:
            offenders += [f"{module}.py uses {name}" for name in _foreign_names(tree)
                          if name.split(".")[0] in ("triton", "torch") and (module, name) not in LOOKS]
    assert not offenders, offenders
    assert {m.split(".")[0] for m, _ in _modules()} >= set(PURE)  # every pure module named exists


def test_no_import_loop_between_the_packages_modules():
    imports = {}
    for module, tree in _modules():
        found = set()
        for node in tree.body:  # what loading the module imports
            if isinstance(node, ast.ImportFrom) and node.level:
                # relative to the module's package, ``level`` packages up (1: its own)
                base = module.split(".")[:-node.level]
                base = ".".join(base + ([node.module] if node.module else []))
                targets = [base] if node.module else [f"{base}.{a.name}".lstrip(".") for a in node.names]
                found.update(t for t in targets if t)
        imports[module] = found

    def loop_from(start, path):
        for nxt in imports.get(start, ()):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            found = loop_from(nxt, path + [nxt])
            if found:
                return found
        return None

    loops = [loop for loop in (loop_from(m, [m]) for m in imports) if loop]
    assert not loops, loops
