"""The package's shape, read from its sources: no import loop between its modules, and each
foreign system's internals touched by one adapter module only (see ARCHITECTURE in the README)."""

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


def _modules():
    for name in sorted(os.listdir(PACKAGE)):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE, name)) as f:
                yield name[:-3], ast.parse(f.read())


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


def test_no_import_loop_between_the_packages_modules():
    imports = {}
    for module, tree in _modules():
        found = set()
        for node in tree.body:  # what loading the module imports
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
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
