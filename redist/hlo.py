"""Reading collectives out of compiled (post-SPMD-partitioning) HLO text.

Why parse text: XLA decides the collectives of ``jit(identity, out_shardings=dst)`` inside its SPMD
partitioner; the only stable, public view of that decision is ``Compiled.as_text()``. We measure
both sides (XLA's program and our executor's program) with this one parser, so the byte counts
are comparable by construction.

What is understood:

- opcodes ``all-gather``, ``all-reduce``, ``reduce-scatter``, ``all-to-all``,
  ``collective-permute``, ``ragged-all-to-all`` and their async ``-start`` forms (``-done`` carries
  no new traffic and is skipped);
- ``replica_groups`` written explicitly (``{{0,1},{2,3}}``), as iota lists (``[2,4]<=[8]``,
  ``[4,2]<=[2,4]T(1,0)``), or as Shardy mesh-axes groups
  (``mesh['axis_0'=4,'axis_1'=2], device_ids=([2,2,2]T(0,2,1)) {'axis_0':(2)2}``); an empty
  ``{}`` means one group of every device;
- ``source_target_pairs`` of permutes.

Bytes received per device follow docs/design.md section 4 (ring algorithms), averaged over the
``num_partitions`` devices of the module:

- all-gather: a device receives the ``p-1`` blocks it lacks: ``(p-1) * operand``
  (= ``(p-1)/p`` of the gathered result);
- reduce-scatter: ``(p-1)/p * operand``; all-reduce: ``2 (p-1)/p * operand``;
- all-to-all: ``(p-1)/p * operand`` (all operands of a tuple all-to-all together);
- collective-permute: every real pair ``s -> t`` with ``s != t`` delivers one operand to ``t``.

``ragged-all-to-all`` moves data-dependent amounts, so its bytes are ``None`` (unknown statically).
Collectives inside loop bodies would be counted once; redistribution programs have no loops.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from spmd_types import DTYPES

COLLECTIVE_KINDS = (
    "all-gather",
    "all-reduce",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "ragged-all-to-all",
)

# HLO primitive type -> bits: our dtype table (HLO spells f8_e4m3fn as f8e4m3fn), plus the HLO
# types a sharding type cannot hold (sub-byte and exotic floats, tokens); sub-byte types are
# rounded up per element by XLA, we count bits/8.
_HLO_BITS: dict[str, int] = {name.replace("_", ""): 8 * size for name, (_, size) in DTYPES.items()}
_HLO_BITS.update({
    "s2": 2, "u2": 2, "s4": 4, "u4": 4, "f8e4m3": 8, "f8e4m3fnuz": 8, "f8e5m2fnuz": 8,
    "f8e4m3b11fnuz": 8, "f8e3m4": 8, "f4e2m1fn": 4, "f8e8m0fnu": 8, "token": 0, "opaque": 0,
})

_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([0-9,\s]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")
_INSTR_HEAD = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_NUM_PARTITIONS = re.compile(r"num_partitions=(\d+)")
_IOTA = re.compile(r"\[[0-9,\s]+\]<=\[[0-9,\s]+\](?:T\([0-9,\s]+\))?")


@dataclass(frozen=True)
class Collective:
    """One collective instruction of a compiled module, with what a device receives from it."""

    name: str
    kind: str  # one of COLLECTIVE_KINDS (async "-start" folded into the base kind)
    groups: tuple[tuple[int, ...], ...]  # replica groups, or the (source, target) pairs of a permute
    operand_bytes: int  # per device, all operands together
    result_bytes: int  # per device, the collective's own result (async wrappers excluded)
    recv_bytes: float | None  # averaged over the module's devices; None if data-dependent
    operand_elements: int = 0
    recv_elements: float | None = None  # the same count in elements (dtype-independent)
    groups_form: str = ""  # how the groups were spelled: explicit, iota, mesh, all, pairs

    @property
    def group_size(self) -> int:
        """Largest group (2 for a permute, whose groups are pairs)."""
        return max((len(g) for g in self.groups), default=1)

    def summary(self) -> str:
        """Compact text, e.g. ``all-gather(p=4, 2048B)``."""
        if self.kind == "collective-permute":
            real = sum(1 for s, t in self.groups if s != t)
            return f"{self.kind}({real} pairs, {self.operand_bytes}B)"
        return f"{self.kind}(p={self.group_size}, {self.operand_bytes}B)"


@dataclass(frozen=True)
class HloCollectives:
    """All collectives of one module and their total bytes received per device."""

    num_devices: int
    collectives: tuple[Collective, ...]

    @property
    def recv_bytes(self) -> float | None:
        """Sum over collectives; ``None`` if any collective moves a data-dependent amount."""
        return _total(c.recv_bytes for c in self.collectives)

    @property
    def recv_elements(self) -> float | None:
        """Elements received per device (``None`` as for bytes)."""
        return _total(c.recv_elements for c in self.collectives)

    def recv_bytes_as(self, itemsize: int) -> float | None:
        """Bytes as if every collective ran in a dtype of ``itemsize`` bytes.

        Why: XLA's CPU backend widens bf16/f16 collectives to f32 (float normalization), which
        doubles the raw HLO bytes of 16-bit arrays on *both* sides. A redistribution never changes
        the dtype, so elements x the array's item size is the algorithm's traffic.
        """
        el = self.recv_elements
        return None if el is None else el * itemsize

    def device_recv_bytes_as(self, itemsize: int) -> np.ndarray | None:
        """Bytes each device receives over all collectives (counted as ``recv_bytes_as`` counts them);
        ``None`` if any amount is data-dependent."""
        per = [device_recv_elements(c, self.num_devices) for c in self.collectives]
        if any(p is None for p in per):
            return None
        return sum((p for p in per if p is not None), np.zeros(self.num_devices)) * itemsize

    def kinds(self) -> tuple[str, ...]:
        return tuple(c.kind for c in self.collectives)

    def summary(self) -> str:
        return " + ".join(c.summary() for c in self.collectives) or "(none)"


Signature = tuple[tuple[str, tuple[tuple[int, ...], ...], float], ...]


def collective_signature(h: HloCollectives) -> Signature:
    """The collectives of a module as a sorted multiset of (kind, device groups, elements received
    per device). Two modules with one signature run the same collectives on the same data sizes:
    neither can be faster by its communication, only by its local passes (16-bit widening, copies, transposes)
    and the order the collectives run in (``collective_sequence``).
    Groups are compared as sets (the member order inside a group is a local reorder); a permute's
    self-pairs move nothing and are left out."""
    return tuple(sorted(collective_sequence(h)))


def collective_sequence(h: HloCollectives) -> Signature:
    """``collective_signature``'s entries in program order (a compiled module's text lists its entry
    computation in schedule order). Why besides the multiset: the same two collectives in the
    other order are another program, and run at another speed (docs/design.md 8.2)."""
    return tuple(collective_key(c) for c in h.collectives)


def collective_key(c: Collective) -> tuple[str, tuple[tuple[int, ...], ...], float]:
    """What a collective costs by: kind, groups as sets (permute pairs without self-pairs),
    elements received per device."""
    groups: tuple[tuple[int, ...], ...]
    if c.kind == "collective-permute":
        groups = tuple(sorted((s, t) for s, t in c.groups if s != t))
    else:
        groups = tuple(sorted(tuple(sorted(g)) for g in c.groups))
    return (c.kind, groups, round(c.recv_elements, 3) if c.recv_elements is not None else -1.0)


def _total(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return total


# -- shapes ------------------------------------------------------------------------------------------
def shape_bytes(text: str) -> int:
    """Bytes of an HLO shape: ``f32[8,64]{1,0}``, a tuple ``(f32[2], s32[])``, ``token[]``..."""
    return _shape_size(text)[1]


def shape_elements(text: str) -> int:
    """Number of array elements of an HLO shape (all tuple leaves, tokens count 0)."""
    return _shape_size(text)[0]


def _shape_size(text: str) -> tuple[int, int]:
    elements = total = 0
    for dtype, dims in _ARRAY_SHAPE.findall(_COMMENT.sub("", text)):
        if dtype not in _HLO_BITS:
            raise ValueError(f"unknown HLO element type {dtype!r} in shape {text!r}")
        n = math.prod(int(d) for d in dims.replace(" ", "").split(",") if d)
        if _HLO_BITS[dtype]:
            elements += n
        total += (n * _HLO_BITS[dtype] + 7) // 8
    return elements, total


def tuple_element_bytes(text: str) -> list[int]:
    """Bytes of each top-level element of a tuple shape (a non-tuple shape gives one element)."""
    text = _COMMENT.sub("", text).strip()
    if not text.startswith("("):
        return [shape_bytes(text)]
    return [shape_bytes(part) for part in split_top_level(text[1:-1])]


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside any brackets (), [], {}."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


def _match_close(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``text[start]``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[text[start]]]
    for i in range(start + 1, len(text)):
        ch = text[i]
        if ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return i
    raise ValueError(f"unbalanced brackets in {text!r}")


# -- instructions -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Instruction:
    """One HLO instruction line, split into its parts (no semantics)."""

    name: str
    shape: str
    opcode: str
    operands: tuple[str, ...]  # raw operand texts ("%p" or "f32[8] %p")
    attrs: str


def parse_instruction(line: str) -> Instruction | None:
    """Split ``%n = SHAPE opcode(OPERANDS), attrs``; ``None`` for lines that are not instructions."""
    line = _COMMENT.sub("", line)
    m = _INSTR_HEAD.match(line)
    if not m:
        return None
    rest = line[m.end():]
    if rest.startswith("("):
        end = _match_close(rest, 0)
        shape, rest = rest[: end + 1], rest[end + 1:]
    else:
        sm = re.match(r"[a-z][a-z0-9]*\[[0-9,\s]*\](\{[^}]*\})?", rest)
        if not sm:
            return None
        shape, rest = sm.group(0), rest[sm.end():]
    om = re.match(r"\s*([a-z][\w\-]*)\(", rest)
    if not om:
        return None
    open_at = om.end() - 1
    close_at = _match_close(rest, open_at)
    operands = tuple(split_top_level(rest[open_at + 1: close_at]))
    attrs = rest[close_at + 1:].lstrip(", ")
    return Instruction(m.group(1), shape, om.group(1), operands, attrs)


def _operand_name(text: str) -> str:
    return text.split()[-1].lstrip("%") if text.split() else ""


def _operand_shape(text: str) -> str | None:
    """The shape written inline before an operand name (older HLO printing), if any."""
    parts = text.rsplit(None, 1)
    return parts[0] if len(parts) == 2 else None


# -- replica groups ---------------------------------------------------------------------------------
def _attr(attrs: str, key: str) -> str | None:
    """The raw value of ``key=...`` in an attribute list (balanced brackets)."""
    m = re.search(rf"(?:^|[\s,]){re.escape(key)}=", attrs)
    if not m:
        return None
    i = m.end()
    iota = _IOTA.match(attrs, i)
    if iota:
        return iota.group(0)
    if i < len(attrs) and attrs[i] in "{[(":
        return attrs[i: _match_close(attrs, i) + 1]
    if attrs.startswith("mesh[", i):
        return _mesh_groups_text(attrs, i)
    j = i
    while j < len(attrs) and attrs[j] not in ", ":
        j += 1
    return attrs[i:j]


def _mesh_groups_text(attrs: str, i: int) -> str:
    """The full ``mesh[...]`` [``, device_ids=(...)``] ``{axes}`` value starting at ``attrs[i]``."""
    j = _match_close(attrs, i + 4) + 1
    rest = attrs[j:]
    dm = re.match(r",\s*device_ids=", rest)
    if dm:
        k = j + dm.end()
        j = _match_close(attrs, k) + 1
    bm = re.match(r"\s*\{", attrs[j:])
    if not bm:
        raise ValueError(f"mesh replica groups without an axis list: {attrs[i:]!r}")
    k = j + bm.end() - 1
    return attrs[i: _match_close(attrs, k) + 1]


def iota_device_list(text: str) -> np.ndarray:
    """``[2,4]<=[8]`` or ``[4,2]<=[2,4]T(1,0)``: reshape(transpose(reshape(iota))).

    The ``[out]<=`` prefix is optional (Shardy's ``device_ids=([2,2,2]T(0,2,1))`` omits it; the
    result is then flat).
    """
    m = re.fullmatch(r"\s*(?:\[([0-9,\s]+)\]<=)?\[([0-9,\s]+)\](?:T\(([0-9,\s]+)\))?\s*", text)
    if not m:
        raise ValueError(f"not an iota device list: {text!r}")
    src_shape = [int(v) for v in m.group(2).split(",")]
    ids = np.arange(math.prod(src_shape)).reshape(src_shape)
    if m.group(3):
        ids = ids.transpose([int(v) for v in m.group(3).split(",")])
    out_shape = [int(v) for v in m.group(1).split(",")] if m.group(1) else [-1]
    return ids.reshape(out_shape)


def parse_replica_groups(text: str, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """Replica groups in any of XLA's three spellings (see the module docstring)."""
    text = text.strip()
    if text.startswith("mesh["):
        return _mesh_replica_groups(text)
    if text.startswith("["):
        return tuple(tuple(int(v) for v in row) for row in iota_device_list(text))
    if text in ("{}", ""):
        return (tuple(range(num_devices)),)
    inner = text[1:-1]
    groups = []
    for g in split_top_level(inner):
        body = g.strip()[1:-1]
        groups.append(tuple(int(v) for v in body.split(",") if v.strip()))
    return tuple(groups)


def _mesh_replica_groups(text: str) -> tuple[tuple[int, ...], ...]:
    """``mesh['a'=4,'b'=2], device_ids=([2,2,2]T(0,2,1)) {'a':(2)2, 'b'}``.

    The mesh's devices (row-major, or ``device_ids``) are grouped by the listed (sub-)axes: a
    group is the devices equal on every other coordinate digit, ordered by the listed digits
    (first listed most significant). A sub-axis ``'a':(pre)size`` is the digit of size ``size``
    whose more-major factors multiply to ``pre``, exactly as in ``spmd_types.SubAxis``.
    """
    mm = re.match(r"mesh\[(.*?)\]", text)
    if not mm:
        raise ValueError(f"bad mesh replica groups {text!r}")
    axes: list[tuple[str, int]] = []
    for part in split_top_level(mm.group(1)):
        axis_name, axis_size = part.split("=")
        axes.append((axis_name.strip().strip("'\""), int(axis_size)))
    shape = [s for _, s in axes]
    n = math.prod(shape)
    dm = re.search(r"device_ids=\((.*?)\)\s*\{", text)
    if dm:
        body = dm.group(1).strip()
        if body.startswith("["):
            ids = iota_device_list(body).reshape(-1)
        else:
            ids = np.array([int(v) for v in body.split(",")])
    else:
        ids = np.arange(n)
    group_text = text[text.rindex("{") + 1: text.rindex("}")]
    pos = {name: i for i, (name, _) in enumerate(axes)}
    digits: list[tuple[int, int, int]] = []  # (axis position, pre, size)
    for ref in split_top_level(group_text):
        rm = re.fullmatch(r"\s*['\"]?([\w.\-]+)['\"]?(?::\((\d+)\)(\d+))?\s*", ref)
        if not rm:
            raise ValueError(f"bad axis reference {ref!r} in {text!r}")
        p = pos[rm.group(1)]
        pre, size = (int(rm.group(2)), int(rm.group(3))) if rm.group(2) else (1, shape[p])
        digits.append((p, pre, size))
    coords = np.array(list(np.ndindex(*shape)), dtype=np.int64).reshape(n, len(shape))
    key = coords.copy()
    gcoord = np.zeros(n, dtype=np.int64)
    for p, pre, size in digits:
        stride = shape[p] // (pre * size)
        digit = (coords[:, p] // stride) % size
        key[:, p] -= digit * stride
        gcoord = gcoord * size + digit
    groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for i in range(n):
        groups.setdefault(tuple(key[i]), []).append((int(gcoord[i]), int(ids[i])))
    return tuple(tuple(d for _, d in sorted(members)) for members in groups.values())


def groups_form(text: str) -> str:
    """Which of XLA's spellings ``text`` uses (the same groups can run differently fast)."""
    text = text.strip()
    if text.startswith("mesh["):
        return "mesh"
    if text.startswith("["):
        return "iota"
    return "all" if text in ("", "{}") else "explicit"


def parse_pairs(text: str) -> tuple[tuple[int, int], ...]:
    """``{{0,1},{1,0}}`` -> ((0, 1), (1, 0))."""
    return tuple((int(a), int(b)) for a, b in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", text))


# -- the bytes formulas of docs/design.md section 4 ------------------------------------------------------
PER_MEMBER: dict[str, Callable[[int, float], float]] = {
    "all-gather": lambda p, operand: (p - 1) * operand,
    "reduce-scatter": lambda p, operand: (p - 1) / p * operand,
    "all-reduce": lambda p, operand: 2 * (p - 1) / p * operand,
    "all-to-all": lambda p, operand: (p - 1) / p * operand,
}
"""What each member of a group of ``p`` receives from a ring collective of ``operand`` per device."""


def ring_recv_bytes(kind: str, group_sizes: list[int], operand_bytes: int, num_devices: int) -> float:
    """Bytes received per device, averaged over ``num_devices``, for one group-based collective.

    ``group_sizes`` lists every group; each member of a group of size ``p`` receives
    ``PER_MEMBER[kind]``, devices in no group receive nothing.
    """
    return sum(p * PER_MEMBER[kind](p, operand_bytes) for p in group_sizes) / num_devices


def device_recv_elements(c: Collective, num_devices: int) -> np.ndarray | None:
    """Elements each device receives from ``c`` (their mean is ``c.recv_elements``); ``None`` when
    the amount is data-dependent. Why: the slowest device, not the mean, bounds a collective's time."""
    if c.recv_elements is None:
        return None
    out = np.zeros(num_devices)
    if c.kind == "collective-permute":
        for s, t in c.groups:
            if s != t:
                out[t] += c.operand_elements
        return out
    for g in c.groups:
        out[list(g)] += PER_MEMBER[c.kind](len(g), c.operand_elements)
    return out


def permute_recv_bytes(pairs: tuple[tuple[int, int], ...], operand_bytes: int, num_devices: int) -> float:
    """Every pair with distinct ends delivers one operand; averaged over devices."""
    return sum(operand_bytes for s, t in pairs if s != t) / num_devices


# -- the module ---------------------------------------------------------------------------------------
def parse_collectives(hlo_text: str, num_devices: int | None = None) -> HloCollectives:
    """Every collective of a compiled module with its bytes received per device.

    ``num_devices`` defaults to the module's ``num_partitions``.
    """
    if num_devices is None:
        m = _NUM_PARTITIONS.search(hlo_text)
        num_devices = int(m.group(1)) if m else 1
    shapes: dict[str, str] = {}
    instrs: list[Instruction] = []
    for line in hlo_text.splitlines():
        ins = parse_instruction(line)
        if ins is None:
            continue
        shapes[ins.name] = ins.shape
        instrs.append(ins)
    out: list[Collective] = []
    for ins in instrs:
        kind = ins.opcode.removesuffix("-start")
        if kind not in COLLECTIVE_KINDS or ins.opcode.endswith("-done"):
            continue
        # ragged-all-to-all's further operands are the output buffer and offsets, not payload
        elements, operand_bytes = _operand_size(ins, shapes, only_first=kind == "ragged-all-to-all")
        result_bytes = _result_bytes(ins, kind, operand_bytes)
        recv: float | None = None
        recv_el: float | None = None
        if kind == "collective-permute":
            pairs = parse_pairs(_attr(ins.attrs, "source_target_pairs") or "")
            groups: tuple[tuple[int, ...], ...] = pairs
            form = "pairs"
            recv = permute_recv_bytes(pairs, operand_bytes, num_devices)
            recv_el = permute_recv_bytes(pairs, elements, num_devices)
        else:
            text = _attr(ins.attrs, "replica_groups") or "{}"
            groups = parse_replica_groups(text, num_devices)
            form = groups_form(text)
            if kind != "ragged-all-to-all":
                sizes = [len(g) for g in groups]
                recv = ring_recv_bytes(kind, sizes, operand_bytes, num_devices)
                recv_el = ring_recv_bytes(kind, sizes, elements, num_devices)
        out.append(
            Collective(ins.name, kind, groups, operand_bytes, result_bytes, recv, elements, recv_el, form)
        )
    return HloCollectives(num_devices, tuple(out))


def _operand_size(ins: Instruction, shapes: dict[str, str], only_first: bool = False) -> tuple[int, int]:
    """(elements, bytes) of the operands, from inline shapes or the defining instructions."""
    elements = total = 0
    for op in ins.operands[:1] if only_first else ins.operands:
        inline = _operand_shape(op)
        shape = inline if inline is not None else shapes.get(_operand_name(op))
        if shape is None:
            raise ValueError(f"operand {op!r} of {ins.name} has no known shape")
        e, b = _shape_size(shape)
        elements += e
        total += b
    return elements, total


def _result_bytes(ins: Instruction, kind: str, operand_bytes: int) -> int:
    """The collective's own output size; async ``-start`` results bundle operands and scratch."""
    if not ins.opcode.endswith("-start"):
        return shape_bytes(ins.shape)
    elems = tuple_element_bytes(ins.shape)
    # all-gather-start / collective-permute-start / all-reduce-start: (operand(s), result(s), ...)
    if kind == "all-reduce":
        return operand_bytes
    return elems[1] if len(elems) > 1 else elems[0]


# -- local data movement ------------------------------------------------------------------------------
LAYOUT_OPCODES = ("copy", "transpose", "concatenate")
"""Opcodes that only rearrange bytes: what a lowering should not add next to its collectives."""

_FREE_OPCODES = frozenset({
    "parameter", "constant", "bitcast", "get-tuple-element", "tuple", "partition-id", "replica-id",
    "after-all", "iota",
})


@dataclass(frozen=True)
class LocalWrites:
    """The non-collective work of a compiled module's entry computation, per device.

    ``bytes_written`` sums the results of every entry instruction that is neither a collective
    nor free (parameters, bitcasts, tuples): each is one pass over memory that the collectives do
    not account for (layout copies, slices into send buffers, concatenations, zero fills).
    ``layout_ops`` counts copy/transpose/concatenate instructions anywhere in the module (inside
    fusions too) whose result holds at least ``min_bytes``.
    """

    bytes_written: int
    layout_ops: tuple[tuple[str, int], ...]  # (opcode, result bytes), in program order

    def passes(self, block_bytes: int) -> float:
        """``bytes_written`` in units of one local block (the larger of source and destination)."""
        return self.bytes_written / block_bytes if block_bytes else 0.0

    def layout_count(self, opcode: str | None = None) -> int:
        return sum(1 for op, _ in self.layout_ops if opcode is None or op == opcode)


def program_text(hlo_text: str) -> str:
    """A module's computations without metadata and the stack-frame tables before them: equal for
    two compilations of the same program written through different Python code."""
    code = [line for line in hlo_text.splitlines() if line.startswith(("%", "ENTRY", " ", "}"))]
    return re.sub(r",? metadata=\{[^}]*\}", "", "\n".join(code))


def _entry_lines(hlo_text: str) -> list[str]:
    lines = hlo_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("ENTRY"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("}")), len(lines))
            return lines[i + 1: end]
    return []


def local_writes(hlo_text: str, min_bytes: int = 1) -> LocalWrites:
    """What a compiled module writes locally besides its collectives (see ``LocalWrites``)."""
    written = 0
    for line in _entry_lines(hlo_text):
        ins = parse_instruction(line)
        if ins is None or ins.opcode in _FREE_OPCODES:
            continue
        if ins.opcode.removesuffix("-start").removesuffix("-done") in COLLECTIVE_KINDS:
            continue
        written += shape_bytes(ins.shape)
    layout: list[tuple[str, int]] = []
    for line in hlo_text.splitlines():
        ins = parse_instruction(line)
        if ins is not None and ins.opcode in LAYOUT_OPCODES and shape_bytes(ins.shape) >= min_bytes:
            layout.append((ins.opcode, shape_bytes(ins.shape)))
    return LocalWrites(written, tuple(layout))


def _computations(hlo_text: str) -> dict[str, list[Instruction]]:
    """Each computation of a module (``ENTRY`` under that name) as its parsed instructions."""
    out: dict[str, list[Instruction]] = {}
    body: list[Instruction] | None = None
    for line in hlo_text.splitlines():
        head = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$", line)
        if head:
            body = out.setdefault("ENTRY" if head.group(1) else head.group(2), [])
        elif line.startswith("}"):
            body = None
        elif body is not None and (ins := parse_instruction(line)) is not None:
            body.append(ins)
    return out


def all_to_all_send_ops(hlo_text: str) -> tuple[tuple[str, ...], ...]:
    """For every operand of every all-to-all of the entry computation, the opcodes that build it
    (sorted): those of the fused computation when a fusion makes it (parameters left out), else its own.
    Why: XLA:CPU builds one send buffer per peer; ``("slice",)`` is a plain slice of its input,
    anything more (a ``bitcast``, ``bitcast-convert``, ``transpose``) is work fused into it."""
    comps = _computations(hlo_text)
    entry = {ins.name: ins for ins in comps.get("ENTRY", [])}
    out: list[tuple[str, ...]] = []
    for ins in entry.values():
        if ins.opcode.removesuffix("-start") != "all-to-all":
            continue
        for operand in ins.operands:
            src = entry.get(_operand_name(operand))
            if src is None:
                out.append(("parameter",))
                continue
            called = re.search(r"calls=%?([\w.\-]+)", src.attrs)
            ops = [i.opcode for i in comps.get(called.group(1), [])] if called and src.opcode == "fusion" else [src.opcode]
            out.append(tuple(sorted(op for op in ops if op != "parameter")))
    return tuple(out)
