"""The house's figures, read from the package's sources (no import of the package):

- module-level mutable names outside the Guard, per module, and their count;
- functions over 60 lines, modules over 400 lines;
- the modules that name Triton's internals (``nargs|configs_timings|best_config|f_locals``).
- the modules other than the Triton seam that read an autotuner's fields or frames;
- the modules other than the Inductor seam that read Inductor's internals (``inductor_reads``).

    python3 scripts/house_metrics.py [PACKAGE_DIR] [--json] [--check]

``--check`` exits 1 when a limit is broken: 10 or more mutable names, a function over 60 lines, a
module over 400, Triton's internals named in more than one module, an autotuner's fields or
frames read outside the seams (``autotuner_reads``), or Inductor's read outside its seam
(``inductor_reads``). tests/test_layout.py runs the same functions.

A module-level mutable name (architecture-review-2.md §1.3 and §9) is a name bound at module level
(also inside a module-level ``if``/``try``/``with``) that the package changes after import:
- rebound: a function declares it ``global`` and assigns it, or another module assigns
  ``module.NAME = ...``;
- mutated: anywhere in the package, a store or ``del`` through ``NAME[...]`` or ``NAME.attr``
  (also deeper: ``NAME.a.b[k] = ...``), or a call of a mutating method (``add``, ``append``,
  ``update``, ``setdefault``, ``pop``, ``clear``, ``set``, ...) on ``NAME`` or an attribute of it;
  reached by the name in its own module, by ``from module import NAME`` or by ``module.NAME``;
- an object of a class of the package whose methods (other than ``__init__``) assign ``self.*`` or call a
  mutating method on it:
  a module-level instance of such a class holds mutable state whatever the calls on it look like.
Not counted: the sanctioned Guard (``runtime._guard``), loggers (``logging.getLogger``), and names
nothing changes after import: constants, aliases, compiled regexes, and locks that are only
entered or acquired (a lock counts once it is rebound, e.g. renewed after fork).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_MUTABLE_NAMES = 9  # "under 10"
MAX_TRITON_MODULES = 1
# Readers of Triton's on-disk autotune cache files: a file format Triton writes (its JSON keys), not
# its runtime objects; the report imports no adapter, so it cannot ask the seam. Listed, not counted.
TRITON_FILE_READERS = ("report.cache_import",)
TRITON_INTERNALS = ("nargs", "configs_timings", "best_config", "f_locals")
TRITON_GREP = re.compile("|".join(TRITON_INTERNALS))
# An autotuner's fields and frames are read by the Triton adapter's seam alone (its view of an
# autotuner), so a Triton release means reading one file. A read is ``<x>.<field>`` where ``x`` is a
# name that holds an autotuner in this package (``autotuner``, ``tuner``, ``self.autotuner``), or any
# frame field and ``sys._getframe``.
SEAM = "adapters.triton.seam"
AUTOTUNER_FIELDS = ("cache", "configs", "keys", "arg_names", "pre_hook", "post_hook", "fn", "base_fn", "nargs",
                    "best_config", "configs_timings", "do_bench", "early_config_prune", "perf_model",
                    "configs_top_k", "restore_idx", "reset_idx", "user_defined_pre_hook", "user_defined_post_hook")
AUTOTUNER_NAMES = ("autotuner", "tuner")
FRAME_FIELDS = ("f_back", "f_locals", "f_globals", "f_code", "_getframe")
# A library tuner's own fields, where they are its family's seam (GPTQ's custom_autotune is no Triton
# Autotuner: its ``cache`` is the seam its family governs; docs/families.md).
OWN_SEAMS = {"adapters.triton.gptq": ("cache",)}
# Modules that read frames or autotuner-like fields of objects that are not Triton's ``Autotuner``,
# and cannot reach the seam: the start-up finder imports nothing of ours. Listed, not counted.
NOT_TRITONS = ("_watch",)
# Inductor's internals are read by the Inductor adapter's seam alone (``CachingAutotuner``, its
# launchers, Dynamo's side table, ``select_algorithm``; its generated program's frames and the traced
# ``@triton.autotune`` kernel too, as an adapter never imports another), whatever the object is called:
# ``x.<field>``, the name imported, or written as a string in code (``getattr(x, "bench")``).
INDUCTOR_SEAM = "adapters.inductor.seam"
INDUCTOR_FIELDS = ("launchers", "_cached_launcher", "inductor_meta", "triton_meta", "size_hints", "custom_kernel",
                   "bench", "def_args", "store_cubin", "_release_static_launchers_except", "triton_interpret",
                   "dump_launch_params", "dump_launch_tensors", "_plugins", "get_active_debug_mode",
                   "kernel_side_table", "id_to_kernel", "preprocessing_fns", "pick_deterministic_choice",
                   "create_inputs_key", "ExternKernelCaller", "return_choice", "return_multi_template",
                   "select_algorithm_autotune")
# Fields Inductor's objects share with Triton's and others' objects: flagged inside the Inductor
# adapter only, where such an object can only be Inductor's (or the kernel Dynamo traced).
INDUCTOR_SHARED_FIELDS = ("fn", "configs", "arg_names", "keys", "config", "src")
# {module: {field: why}}: where one of those names is another object's own field, not Inductor's.
INDUCTOR_LOOKALIKES = {
    "adapters.inductor.names": {"keys": "TuningKey's own key names (core.model), built from the traced kernel's"},
}
SANCTIONED = {("runtime", "_guard")}  # the Guard itself
MUTATING_METHODS = {
    "add", "append", "appendleft", "clear", "discard", "extend", "extendleft", "insert", "pop", "popitem",
    "popleft", "remove", "setdefault", "update", "sort", "reverse", "set", "__setitem__", "__delitem__",
}
DEFAULT_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "autotune_guard")


def modules(package=DEFAULT_PACKAGE):
    """{module name relative to the package ('' for its __init__): (path, source, tree, is_package)}."""
    found = {}
    for root, _, names in sorted(os.walk(package)):
        rel = os.path.relpath(root, package).replace(os.sep, ".")
        for name in sorted(names):
            if name.endswith(".py"):
                stem = name[:-3]
                module = (rel if stem == "__init__" else f"{rel}.{stem}") if rel != "." else ("" if stem == "__init__" else stem)
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    source = f.read()
                found[module] = (path, source, ast.parse(source), stem == "__init__")
    return found


def _module_level(body):
    """Module-level statements, looking into if/try/with blocks (not functions or classes)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            if isinstance(node, (ast.If, ast.Try, ast.With)) and hasattr(node, field):
                yield from _module_level(getattr(node, field))
        for handler in getattr(node, "handlers", ()):
            yield from _module_level(handler.body)


def _resolve(module, is_package, node, mods):
    """The module of ours an ImportFrom names (relative or ``autotune_guard.``), or None."""
    if node.level:
        parts = module.split(".") if module else []
        base = parts if is_package else parts[:-1]
        base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join(base + ([node.module] if node.module else []))
    if node.module and (node.module == "autotune_guard" or node.module.startswith("autotune_guard.")):
        return node.module[len("autotune_guard."):] if "." in node.module else ""
    return None


def _aliases(module, is_package, tree, mods):
    """Names in this module that stand for a module of ours or for a name in one:
    {alias: (module, None)} or {alias: (module, name)}."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node, mods)
            if target is None:
                continue
            for a in node.names:
                full = f"{target}.{a.name}".lstrip(".")
                out[a.asname or a.name] = (full, None) if full in mods else (target, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("autotune_guard.") and a.asname:
                    out[a.asname] = (a.name[len("autotune_guard."):], None)
    return out


def _targets(node):
    """The targets a statement stores to (or deletes), tuples and starred targets unpacked."""
    found = list(node.targets) if isinstance(node, (ast.Assign, ast.Delete)) else \
        [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)) else \
        [item.optional_vars for item in node.items if item.optional_vars is not None] \
        if isinstance(node, (ast.With, ast.AsyncWith)) else []
    out = []
    while found:
        t = found.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            found.extend(t.elts)
        elif isinstance(t, ast.Starred):
            found.append(t.value)
        else:
            out.append(t)
    return out


def _chain(node):
    """(root name, [attributes...]) of ``a.b.c`` / ``a.b[k]``; None when not rooted at a name."""
    attrs = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            attrs.append(node.attr)
        node = node.value
    return (node.id, attrs[::-1]) if isinstance(node, ast.Name) else None


def _stateful_classes(mods):
    """(module, class name) of every class of ours whose methods other than __init__ assign self.*
    or call a mutating method on self or an attribute of it."""
    out = set()
    for module, (_, _, tree, _) in mods.items():
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                if fn.name in ("__init__", "__post_init__", "__new__", "__init_subclass__"):
                    continue
                for node in ast.walk(fn):
                    targets = _targets(node)
                    if any((c := _chain(t)) and c[0] == "self" and c[1] for t in targets):
                        out.add((module, cls.name))
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                            node.func.attr in MUTATING_METHODS and (c := _chain(node.func.value)) and c[0] == "self":
                        out.add((module, cls.name))
    bases = {(m, c.name): {ast.unparse(b).rsplit(".", 1)[-1] for b in c.bases}
             for m, (_, _, tree, _) in mods.items() for c in tree.body if isinstance(c, ast.ClassDef)}
    while True:  # a subclass of a class that changes itself changes itself too
        more = {k for k, names in bases.items() if k not in out and names & {name for _, name in out}}
        if not more:
            return out
        out |= more


def mutable_names(mods=None):
    """{(module, name): (line, why)} of the module-level mutable names outside the Guard."""
    mods = modules() if mods is None else mods
    stateful = _stateful_classes(mods)
    bound = {}  # (module, name) -> (line, value node)
    for module, (_, _, tree, _) in mods.items():
        for node in _module_level(tree.body):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and node.value is not None and \
                        isinstance(node.value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp,
                                                ast.Call, ast.Constant)):
                    bound.setdefault((module, t.id), (node.lineno, node.value))
    found = {}

    def hit(key, why):
        if key in bound and key not in SANCTIONED and key not in found:
            value = bound[key][1]
            if isinstance(value, ast.Call) and ast.unparse(value.func) in ("logging.getLogger", "getLogger"):
                return
            found[key] = (bound[key][0], why)

    for module, (_, _, tree, is_package) in mods.items():
        aliases = _aliases(module, is_package, tree, mods)
        own = {name for (m, name) in bound if m == module}

        def owner(chain):
            """(module, name) a chain rooted here reaches, and the attributes after that name."""
            root, attrs = chain
            if root in aliases:
                target, name = aliases[root]
                if name is not None:
                    return (target, name), attrs
                if attrs:
                    return (target, attrs[0]), attrs[1:]
                return None, None
            if root in own:
                return (module, root), attrs
            return None, None

        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            declared = {name for n in ast.walk(fn) if isinstance(n, ast.Global) for name in n.names}
            for n in ast.walk(fn):
                for t in _targets(n):
                    if isinstance(t, ast.Name) and t.id in declared:
                        key = (module, t.id)
                        if key not in bound:
                            bound[key] = (n.lineno, None)  # first bound inside a function
                        hit(key, f"rebound via global (line {n.lineno})")
        for n in ast.walk(tree):
            for t in _targets(n):
                if isinstance(t, (ast.Attribute, ast.Subscript)) and (c := _chain(t)):
                    key, rest = owner(c)
                    if key is None:
                        continue
                    if key[0] != module and not rest and isinstance(t, ast.Attribute) and c[0] in aliases \
                            and aliases[c[0]][1] is None:
                        hit(key, f"rebound from {module or '__init__'} (line {n.lineno})")
                    else:
                        hit(key, f"{'del' if isinstance(n, ast.Delete) else 'store'} through it in "
                                 f"{module or '__init__'} (line {n.lineno})")
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATING_METHODS:
                c = _chain(n.func.value)
                if c:
                    key, _ = owner(c)
                    if key is not None:
                        hit(key, f".{n.func.attr}() in {module or '__init__'} (line {n.lineno})")
    for (module, name), (line, value) in bound.items():
        if isinstance(value, ast.Call) and (module, name) not in SANCTIONED:
            func = ast.unparse(value.func)
            cls = func.rsplit(".", 1)[-1]
            tree_aliases = _aliases(module, mods[module][3], mods[module][2], mods)
            home = tree_aliases.get(cls, (module, cls))
            if (home[0], home[1] or cls) in stateful or (module, cls) in stateful:
                found.setdefault((module, name), (line, f"an instance of {cls}, whose methods change it"))
    return dict(sorted(found.items()))


def long_functions(mods=None, limit=MAX_FUNCTION_LINES):
    """[(module, qualified-ish name, lines)] of functions over ``limit`` lines (``end_lineno - lineno + 1``)."""
    mods = modules() if mods is None else mods
    return sorted(((m, n.name, n.end_lineno - n.lineno + 1) for m, (_, _, tree, _) in mods.items()
                   for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and n.end_lineno - n.lineno + 1 > limit), key=lambda r: -r[2])


def long_modules(mods=None, limit=MAX_MODULE_LINES):
    mods = modules() if mods is None else mods
    return sorted(((m, source.count("\n") + (not source.endswith("\n") and bool(source)))
                   for m, (_, source, _, _) in mods.items()
                   if source.count("\n") + (not source.endswith("\n") and bool(source)) > limit), key=lambda r: -r[1])


def _docstrings(tree):
    return {id(body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and (body := node.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}


def triton_internals(mods=None):
    """{module: [line, ...]} where the code (not comments, not docstrings) names one of Triton's
    internals: an attribute (``x.nargs``), a name, or a string that is exactly one of them
    (``getattr(x, "best_config")``, ``document["configs_timings"]``). Prose that mentions one (a
    message, a comment, a docstring) and argparse's ``nargs=`` keyword are not a use of Triton's
    internals. ``grep_triton_internals`` gives the plain grep."""
    mods = modules() if mods is None else mods
    out = {}
    for m, (_, _, tree, _) in mods.items():
        docs = _docstrings(tree)
        lines = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr in TRITON_INTERNALS:
                lines.add(n.lineno)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs \
                    and n.value in TRITON_INTERNALS:
                lines.add(n.lineno)
            elif isinstance(n, ast.Name) and n.id in TRITON_INTERNALS:
                lines.add(n.lineno)
        if lines:
            out[m] = sorted(lines)
    return out


def autotuner_reads(mods=None):
    """{module: [line, ...]} where a module other than the seams reads an autotuner's field
    (``AUTOTUNER_FIELDS`` of a name in ``AUTOTUNER_NAMES``) or a frame (``FRAME_FIELDS``); the
    ``_watch`` module (the start-up finder, standard library only) is not an adapter's. The Inductor
    seam reads Inductor's autotuner and its generated program's frames (``inductor_reads``)."""
    mods = modules() if mods is None else mods
    out = {}
    for m, (_, _, tree, _) in mods.items():
        if m in (SEAM, INDUCTOR_SEAM):
            continue
        own = OWN_SEAMS.get(m, ())
        lines = set()
        for n in ast.walk(tree):
            if not isinstance(n, ast.Attribute):
                continue
            holder = n.value
            named = (isinstance(holder, ast.Name) and holder.id in AUTOTUNER_NAMES) or \
                (isinstance(holder, ast.Attribute) and holder.attr == "autotuner")
            if (named and n.attr in AUTOTUNER_FIELDS and n.attr not in own) or n.attr in FRAME_FIELDS:
                lines.add(n.lineno)
        if lines:
            out[m] = sorted(lines)
    return out


def inductor_reads(mods=None):
    """{module: [line, ...]} where a module other than the Inductor seam reads one of Inductor's
    internals, whatever the object is called: an attribute of ``INDUCTOR_FIELDS`` (of
    ``INDUCTOR_SHARED_FIELDS`` too inside the Inductor adapter), or one of ``INDUCTOR_FIELDS``
    imported or written as a string in code (not in a docstring); ``INDUCTOR_LOOKALIKES`` left out."""
    mods = modules() if mods is None else mods
    adapter = INDUCTOR_SEAM.rpartition(".")[0] + "."
    out = {}
    for m, (_, _, tree, _) in mods.items():
        if m == INDUCTOR_SEAM:
            continue
        lookalikes = set(INDUCTOR_LOOKALIKES.get(m, ()))
        fields = set(INDUCTOR_FIELDS) - lookalikes
        attributes = fields | (set(INDUCTOR_SHARED_FIELDS) - lookalikes if m.startswith(adapter) else set())
        docs = _docstrings(tree)
        methods = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}  # ``d.keys()`` reads no field
        lines = {n.lineno for n in ast.walk(tree)
                 if (isinstance(n, ast.Attribute)
                     and (n.attr in fields or (n.attr in attributes and id(n) not in methods)))
                 or (isinstance(n, ast.ImportFrom) and any(a.name in fields for a in n.names))
                 or (isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                     and n.value in fields)}
        if lines:
            out[m] = sorted(lines)
    return out


def runtime_triton_modules(found) -> list:
    """The modules of ``triton_internals`` that read Triton's runtime objects (its cache-file readers left out)."""
    return [m for m in found if m not in TRITON_FILE_READERS]


def grep_triton_internals(mods=None):
    """{module: count of lines} that the plain ``grep -E 'nargs|configs_timings|best_config|f_locals'`` finds."""
    mods = modules() if mods is None else mods
    return {m: n for m, (_, source, _, _) in mods.items()
            if (n := sum(1 for line in source.splitlines() if TRITON_GREP.search(line)))}


def measure(package=DEFAULT_PACKAGE):
    mods = modules(package)
    names = mutable_names(mods)
    return {
        "modules": len(mods),
        "mutable_names": len(names),
        "mutable_modules": len({m for m, _ in names}),
        "mutable": [{"module": m, "name": n, "line": line, "why": why} for (m, n), (line, why) in names.items()],
        "functions_over_60": [{"module": m, "function": f, "lines": n} for m, f, n in long_functions(mods)],
        "modules_over_400": [{"module": m, "lines": n} for m, n in long_modules(mods)],
        "triton_internals": triton_internals(mods),
        "triton_internals_grep": grep_triton_internals(mods),
        "autotuner_reads": autotuner_reads(mods),
        "inductor_reads": inductor_reads(mods),
    }


def broken(figures):
    """The limits the figures break, as lines (empty when none is)."""
    out = []
    if figures["mutable_names"] > MAX_MUTABLE_NAMES:
        out.append(f"{figures['mutable_names']} module-level mutable names outside the Guard (limit: under 10)")
    out += [f"function {f['module']}.{f['function']}: {f['lines']} lines (limit {MAX_FUNCTION_LINES})"
            for f in figures["functions_over_60"]]
    out += [f"module {m['module']}: {m['lines']} lines (limit {MAX_MODULE_LINES})" for m in figures["modules_over_400"]]
    runtime_readers = runtime_triton_modules(figures["triton_internals"])
    if len(runtime_readers) > MAX_TRITON_MODULES:
        out.append(f"Triton's internals named in {len(runtime_readers)} modules (limit 1): " + ", ".join(runtime_readers))
    out += [f"module {m} reads an autotuner's fields or frames (lines {', '.join(map(str, ls))}): only {SEAM} may"
            for m, ls in figures["autotuner_reads"].items() if m not in NOT_TRITONS]
    out += [f"module {m} reads Inductor's internals (lines {', '.join(map(str, ls))}): only {INDUCTOR_SEAM} may"
            for m, ls in figures["inductor_reads"].items()]
    return out


def _text(figures):
    lines = [f"{figures['modules']} modules"]
    lines.append(f"module-level mutable names outside the Guard: {figures['mutable_names']} in "
                 f"{figures['mutable_modules']} modules")
    for row in figures["mutable"]:
        lines.append(f"  {row['module'] or '__init__'}:{row['line']} {row['name']}  ({row['why']})")
    lines.append(f"functions over {MAX_FUNCTION_LINES} lines: {len(figures['functions_over_60'])}")
    lines += [f"  {f['module']}.{f['function']}: {f['lines']}" for f in figures["functions_over_60"]]
    lines.append(f"modules over {MAX_MODULE_LINES} lines: {len(figures['modules_over_400'])}")
    lines += [f"  {m['module']}: {m['lines']}" for m in figures["modules_over_400"]]
    lines.append(f"modules naming Triton's internals in code: {len(figures['triton_internals'])} (its cache-file "
                 f"readers, {', '.join(TRITON_FILE_READERS)}, not counted against the limit)")
    lines += [f"  {m}: lines {', '.join(map(str, ls))}" for m, ls in figures["triton_internals"].items()]
    lines.append(f"modules the plain grep ({TRITON_GREP.pattern}) finds: {len(figures['triton_internals_grep'])} "
                 "(comments, docstrings and argparse's nargs= included)")
    lines += [f"  {m}: {n} line{'s' if n != 1 else ''}" for m, n in figures["triton_internals_grep"].items()]
    lines.append(f"modules other than {SEAM} reading an autotuner's fields or frames: {len(figures['autotuner_reads'])} "
                 f"({', '.join(NOT_TRITONS)}, whose objects are not Triton's, not counted against the limit)")
    lines += [f"  {m}: lines {', '.join(map(str, ls))}" for m, ls in figures["autotuner_reads"].items()]
    lines.append(f"modules other than {INDUCTOR_SEAM} reading Inductor's internals: {len(figures['inductor_reads'])}")
    lines += [f"  {m}: lines {', '.join(map(str, ls))}" for m, ls in figures["inductor_reads"].items()]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", nargs="?", default=DEFAULT_PACKAGE, help="the package directory (default: ours)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text")
    parser.add_argument("--check", action="store_true", help="exit 1 when a limit is broken")
    args = parser.parse_args(argv)
    figures = measure(args.package)
    print(json.dumps(figures, indent=1) if args.json else _text(figures))
    problems = broken(figures)
    if args.check and problems:
        print("limits broken:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
