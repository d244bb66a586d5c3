"""Print the `uv pip install` options that make uv read the same packages pip would on this machine.

uv reads no pip configuration, so pip's find-links, extra indexes and constraints (`pip config list`, which also
shows the PIP_* environment variables) are turned into uv's flags. Where pip has none of them, nothing is printed.
"""

from __future__ import annotations

import ast
import subprocess
import sys

FLAGS = {"find-links": "--find-links", "extra-index-url": "--extra-index-url", "index-url": "--index-url",
         "constraint": "--constraint"}  # fmt: skip


def pip_settings(python: str) -> dict[str, list[str]]:
    out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False).stdout
    found: dict[str, list[str]] = {}
    for line in out.splitlines():  # e.g. global.find-links='/opt/wheels' or :env:.constraint='a b'
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in FLAGS and value:
            for item in ast.literal_eval(value).split():
                found.setdefault(name, [])
                if item not in found[name]:
                    found[name].append(item)
    return found


if __name__ == "__main__":
    args = [f"{FLAGS[name]}={item}" for name, items in pip_settings(sys.argv[1]).items() for item in items]
    print(" ".join(args))
