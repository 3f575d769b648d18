"""The modules setup.py compiles with mypyc, held to what mypyc asks of the code around them.

- An interpreted class cannot subclass a compiled one ("interpreted classes cannot inherit from
  compiled"): every subclass of a class in a compiled module is compiled too. The reverse is
  allowed, except on an abstract base class (the compiled class shares its base's registry:
  ``isinstance(frozenset(), CompactPeers)`` held when ``CompactPeers``, a ``Set``, was compiled)
  and on a dependency's class (the build leaves their types out).
- A compiled function borrows its arguments, which gevent's ``kill`` frees under a running
  greenlet: every greenlet starts in ``crawler.spawning``'s interpreted frame.
- Under ``PEERCRAWL_TEST_COMPILED=1`` (.ci/run's compiled pass) every listed module is loaded from
  its extension, so a build that fell back to the sources fails the run.

The classes are read as the interpreter loads them, so these hold whether or not this checkout
was compiled.
"""

import abc
import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crawler", "workers", "geo")


def compiled_files() -> tuple[str, ...]:
    """setup.py's COMPILED, read from its source (running it would start a build)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COMPILED":
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("setup.py names no COMPILED")


def module_of(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def all_modules() -> dict:
    modules = {}
    for root in PACKAGES:
        package = importlib.import_module(root)
        modules[root] = package
        for info in pkgutil.walk_packages(package.__path__, root + "."):
            if not info.name.endswith("__main__"):
                modules[info.name] = importlib.import_module(info.name)
    return modules


def defined_classes(compiled: bool):
    """``(module name, class)`` of every class defined in a module setup.py compiles (``compiled``)
    or in one it leaves interpreted (not ``compiled``)."""
    names = {module_of(f) for f in compiled_files()}
    for name, module in all_modules().items():
        if (name in names) == compiled:
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ == name:
                    yield name, cls


def test_every_compiled_file_exists_once():
    files = compiled_files()
    assert len(files) == len(set(files))
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"setup.py compiles files that do not exist: {missing}"


def test_every_subclass_of_a_compiled_class_is_compiled():
    compiled = {module_of(f) for f in compiled_files()}
    assert compiled <= set(all_modules())
    stranded = [f"{name}.{cls.__qualname__} subclasses {base.__module__}.{base.__qualname__}"
                for name, cls in defined_classes(compiled=False)
                for base in inspect.getmro(cls)[1:] if base.__module__ in compiled]
    assert not stranded, "interpreted subclasses of compiled classes: " + "; ".join(stranded)


def test_no_compiled_class_derives_from_a_dependencys_class():
    """setup.py compiles without the dependencies' types (the same code whether or not they are
    installed), so a base class of theirs would be unknown to mypyc: compiled as a native class, an
    exception on redis-py's ``ConnectionError`` crashed the process when raised."""
    import sys

    foreign = [f"{name}.{cls.__qualname__} derives from {base.__module__}.{base.__qualname__}"
               for name, cls in defined_classes(compiled=True) for base in inspect.getmro(cls)[1:]
               if base.__module__.split(".")[0] not in (*PACKAGES, *sys.stdlib_module_names, "builtins")]
    assert not foreign, "compiled classes on dependencies' classes: " + "; ".join(foreign)


def test_no_compiled_class_derives_from_an_abstract_base_class():
    abstract = [f"{name}.{cls.__qualname__}" for name, cls in defined_classes(compiled=True)
                if isinstance(cls, abc.ABCMeta)]
    assert not abstract, "compiled classes on abstract bases: " + ", ".join(abstract)


_STARTS = {"spawn", "spawn_later", "spawn_raw", "Greenlet"}


def _greenlet_starts(path: Path) -> list[str]:
    """Calls in ``path`` that start a greenlet without crawler.spawning: ``gevent.spawn(...)`` and
    its kin, names imported from gevent, and a group's or pool's ``.spawn(...)``."""
    tree = ast.parse(path.read_text())
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("gevent") for alias in node.names if alias.name in _STARTS}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        direct = isinstance(fn, ast.Name) and fn.id in imported
        through = isinstance(fn, ast.Attribute) and fn.attr in _STARTS and not (
            isinstance(fn.value, ast.Name) and fn.value.id == "spawning")
        if direct or through:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_greenlet_starts_in_the_interpreted_frame_of_crawler_spawning():
    assert "crawler/spawning.py" not in compiled_files()
    spawning = ROOT / "crawler" / "spawning.py"
    starts = [hit for root in PACKAGES for path in sorted((ROOT / root).rglob("*.py")) if path != spawning
              for hit in _greenlet_starts(path)]
    assert not starts, "greenlets started without crawler.spawning: " + ", ".join(starts)



def test_a_compiled_run_loads_every_compiled_module_from_its_extension():
    """Under ``PEERCRAWL_TEST_COMPILED=1`` (.ci/run's compiled pass) every module setup.py compiles
    is loaded from its extension, so a build that fell back to the sources fails the run; on the
    sources, every one is loaded from its source."""
    import os

    compiled = os.environ.get("PEERCRAWL_TEST_COMPILED") == "1"
    modules = {module_of(f): importlib.import_module(module_of(f)) for f in compiled_files()}
    wrong = [name for name, module in modules.items() if module.__file__.endswith(".py") == compiled]
    assert not wrong, f"{'not ' if compiled else ''}compiled: {wrong}"
