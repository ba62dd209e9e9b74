"""Freed memory stays in the process for the next run (glibc): checked in a child process, which the tuning
changes for good."""

import subprocess
import sys

import pytest

CHILD = """
import ctypes, sys, torch

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tuned":
    from hookscope.system.allocator import keep_freed_memory
    assert keep_freed_memory()
block = torch.empty(20 * 2**20, dtype=torch.uint8)
block.fill_(1)
del block
print(libc.mallinfo2().fordblks)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_freed_20_mb_block_is_kept_for_reuse_only_when_tuned():
    def free_bytes_kept(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
        return int(done.stdout.split()[-1])

    assert free_bytes_kept("tuned") >= 20 * 2**20
    assert free_bytes_kept("default") < 20 * 2**20  # mmapped, and given back at once
