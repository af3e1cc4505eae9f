"""Run a Markdown file's code blocks in order, like one doctest session: ``python markdown_blocks.py FILE``.

Every ```` ```python ```` block runs, in one interpreter whose globals carry over from block to block
(so a later block may use ``x`` from an earlier one). A ```` ```bash ```` block runs only when the
line right after its closing fence is ``<!-- runnable -->`` (most shell blocks install things or
take minutes). The first failure prints ``FILE block N (line L, lang): error`` with the traceback
and exits 1. Each file gets a fresh process so it can set ``XLA_FLAGS`` before importing JAX, as a
reader would.
"""

from __future__ import annotations

import linecache
import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
RUNNABLE = "<!-- runnable -->"


@dataclass(frozen=True)
class Block:
    number: int  # 1-based among the file's executed blocks
    line: int  # 1-based line of the opening fence
    lang: str
    source: str


def blocks(text: str) -> list[Block]:
    """The executed blocks of ``text``: python always, bash when marked runnable."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m["fence"], m["info"].strip().split()
        lang = info[0] if info else ""
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = "\n".join(lines[i + 1 : j]) + "\n"
        marked = j + 1 < len(lines) and lines[j + 1].strip() == RUNNABLE
        if lang == "python" or (lang == "bash" and marked):
            out.append(Block(len(out) + 1, i + 1, lang, body))
        i = j + 1
    return out


def run_file(path: Path) -> int:
    ns: dict[str, object] = {"__name__": "__main__"}
    for b in blocks(path.read_text()):
        where = f"{path} block {b.number} (line {b.line}, {b.lang})"
        if b.lang == "bash":
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", b.source], capture_output=True, text=True)
            sys.stdout.write(r.stdout)
            if r.returncode != 0:
                print(f"{where}: exit status {r.returncode}\n{r.stderr}", file=sys.stderr)
                return 1
            continue
        name = f"{path}:block{b.number}"
        linecache.cache[name] = (len(b.source), None, b.source.splitlines(True), name)  # source in tracebacks
        try:
            exec(compile(b.source, name, "exec"), ns)
        except BaseException:  # noqa: BLE001 - report anything a reader would see fail, then stop
            print(f"{where}: {traceback.format_exc()}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    # Shell blocks call the `redist` command: the one installed next to this interpreter.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    sys.exit(run_file(Path(sys.argv[1])))
