"""essaflow.storage.atomic_dir under a real crash: a writer process killed (os._exit, no cleanup) at each step of the
directory swap leaves one complete copy, and the next writer recovers. The rest of the swap's checks are in
tests/unit/storage/test_atomic_dir.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import atomic_dirs as dirs

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

_CRASHER = """
import os, shutil, sys
from pathlib import Path
from essaflow.storage import atomic_dir as ad

final, what, nth = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
module, name = {"rename": (os, "rename"), "fsync": (os, "fsync"), "rmtree": (shutil, "rmtree")}[what]
real, calls = getattr(module, name), [0]

def dying(*args, **kwargs):
    calls[0] += 1
    if calls[0] == nth:
        os._exit(17)  # a crash: no finally, no cleanup
    return real(*args, **kwargs)

setattr(module, name, dying)
with ad.atomic_dir(final, label="new") as tmp:
    (tmp / "payload.txt").write_text("new")
    (tmp / "sub").mkdir()
    (tmp / "sub" / "big.bin").write_bytes(b"new" * 5000)
"""


@pytest.mark.parametrize(
    ("what", "nth", "survivor"),
    [
        ("fsync", 1, "old"),  # while the new files are being synced
        ("fsync", 4, "old"),  # syncing the staging directory's entries
        ("rename", 1, "old"),  # about to move the old copy aside
        ("rename", 2, "old"),  # old moved aside, new not yet in place: a delete-then-rename writer loses both here
        ("fsync", 7, "new"),  # new in place, parent not yet synced
        ("rmtree", 1, "new"),  # new in place, old copy not yet removed
    ],
)
def test_a_crash_at_any_step_leaves_one_complete_copy_and_the_next_write_recovers(
    tmp_path: Path, what: str, nth: int, survivor: str
):
    final = tmp_path / "art"
    dirs.write(final, "old")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _CRASHER, str(final), what, str(nth)], env=env, capture_output=True)
    assert proc.returncode == 17, proc.stderr.decode()  # it did die at that step
    if (what, nth) == ("rename", 2):
        assert not final.exists() and any(".old-" in n for n in dirs.siblings(final))
    assert dirs.content(final) == survivor  # a reader recovers and sees one complete, verified copy
    dirs.write(final, "next")  # the next writer succeeds and clears what the dead writer left
    assert dirs.content(final) == "next" and dirs.siblings(final) == []
