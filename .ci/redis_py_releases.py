"""Print the redis-py releases .ci/run tests besides the installed one.

Prints two lines, ``lowest X`` and ``newest Y``: X is the oldest release
pyproject.toml's requirement allows (the promise of its lower bound), Y the
newest release published, whatever the upper bound says (so a release that
would break the code shows in CI before the bound is lifted).
"""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

root = Path(__file__).resolve().parent.parent
deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
req = next(Requirement(d) for d in deps if Requirement(d).name == "redis")
out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "redis"],
                     capture_output=True, text=True, check=True).stdout
listed = re.search(r"Available versions: (.*)", out)
if listed is None:
    sys.exit("pip index versions redis listed no releases")
released = [Version(v) for v in listed.group(1).split(", ") if not Version(v).is_prerelease]
allowed = [v for v in released if v in req.specifier]
if not allowed:
    sys.exit(f"no published redis-py release satisfies {req}")
print("lowest", min(allowed))
print("newest", max(released))
