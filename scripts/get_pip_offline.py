"""Stand-in for ansible-test's pip bootstrap script (get-pip.py), whose download host is unreachable here.

ansible-test runs the cached script with get-pip's arguments (pip options + packages). We bootstrap pip
from the interpreter's own ensurepip, then install the same pinned packages from the package index.
"""

import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q"] + args)
