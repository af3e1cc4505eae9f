"""A persistent autotuning cache: each move's timed winner, kept in a JSON file every process reads.

Why: ``redist.autotune`` compiles and times the planner's best few plans, seconds a move; XLA and
Triton keep such results on disk so a program tunes once per machine, not once per process. An
entry records *which* of the planner's ranked candidates won (its index and a fingerprint of its
steps), never a pickled plan: a hit rebuilds the plan with ``synth.ranked``, so it is still a plan
the planner made, ``plan.verify()`` proves it like any other, and an entry the planner no longer
reproduces (a new planner, another profile) is stale, not wrong (docs/design.md, autotuning).

Turned on by ``REDIST_AUTOTUNE_CACHE=/path/file.json`` or ``use_tune_cache(path)``; written by
``redist.autotune(..., cache=path)`` (or with the variable set) and ``redist tune``. The key is the
backend, device kind, process layout (processes, devices per process), mesh, source and
destination types, and the cost model (objective and a digest of its parameters). Under
``jax.distributed`` process 0's file is authoritative: it is read once per process, on process 0,
and its text is handed to every process through the coordination service, so all processes see the
same table and make the same choice (every process must then make its first cached planning call
in the same order, as they make their collectives). Only process 0 writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from redist.coordination import client, gather
from redist.cost import CostModel
from redist.plan import Plan
from redist.synth import ranked
from spmd_types import ShardingType
from spmd_types.memo import Scope, clear, memo

FORMAT = 1
"""The file's format number; a file of another is ignored (with a warning) and replaced on write."""

ENV = "REDIST_AUTOTUNE_CACHE"
"""The environment variable naming the cache file (read at every planning call: cheap)."""


class TuneCacheWarning(UserWarning):
    """The cache could not be used for a move or a file (corrupt, another format, a stale entry);
    the planner used its model's choice instead. Said once per file and problem."""


class Entry(NamedTuple):
    """One move's stored result: the winner's index among ``ranked(src, dst, cm, top)`` and the
    fingerprint of every candidate's steps up to it, and what was measured."""

    winner: int
    fingerprints: tuple[str, ...]
    top: int
    reps: int
    margin: float
    measured_s: tuple[float, ...]


class Hit(NamedTuple):
    """A valid entry and the planner's candidates it indexes (``plans[entry.winner]`` is the winner)."""

    entry: Entry
    plans: tuple[Plan, ...]


_override: str | None = None
_tables: dict[str, dict[str, Any]] = {}
"""Per file path, its entries as this process sees them (loaded once; grown by this process's writes)."""
_generation = 0
"""Bumped whenever a table changes, so resolved plans of an older table are not reused."""
_said: set[str] = set()
_loads = 0


def use_tune_cache(path: str | os.PathLike[str] | None) -> None:
    """Use the cache file ``path`` for every later planning call of this process (over
    ``REDIST_AUTOTUNE_CACHE``); ``None`` goes back to the environment variable. Plans tuned by
    ``autotune`` are stored there and ``redistribute`` / ``reshard`` use them (docs/howto/autotune.md).

    Examples:
        >>> import os, tempfile, redist
        >>> path = os.path.join(tempfile.mkdtemp(), "tuned.json")
        >>> redist.use_tune_cache(path)
        >>> tuned = redist.autotune("f32[64@x,64@y]", "f32[64@y,64@x]", "x=2,y=4", top=2, reps=2)
        >>> redist.redistribute("f32[64@x,64@y]", "f32[64@y,64@x]", "x=2,y=4") == tuned.plan
        True
        >>> redist.use_tune_cache(None)
    """
    global _override
    _override = None if path is None else os.fspath(path)
    _changed()


def active_path(explicit: str | os.PathLike[str] | None = None) -> str | None:
    """The cache file in force: ``explicit``, else ``use_tune_cache``'s, else the environment's."""
    if explicit is not None:
        return os.fspath(explicit)
    return _override if _override is not None else (os.environ.get(ENV) or None)


def cached_plan(src: ShardingType, dst: ShardingType, cm: CostModel) -> Plan | None:
    """The tuned plan for this move from the active cache, or ``None`` (no cache, a miss, or an
    entry that no longer fits: then said once). The planner's hook: with no cache, one dict read."""
    path = active_path()
    if path is None:
        return None
    return _resolved(path, _generation, src, dst, cm)


@memo(Scope.TYPE, maxsize=1024)
def _resolved(path: str, generation: int, src: ShardingType, dst: ShardingType, cm: CostModel) -> Plan | None:
    hit = lookup(path, src, dst, cm)
    return None if hit is None else hit.plans[hit.entry.winner]


def lookup(path: str, src: ShardingType, dst: ShardingType, cm: CostModel) -> Hit | None:
    """The entry of this move in ``path`` with the candidates it indexes, or ``None``: a miss, or a
    stale or malformed entry (a ``TuneCacheWarning``)."""
    key = move_key(src, dst, cm)
    raw = _table(path).get(key)
    if raw is None:
        return None
    entry = _entry(raw)
    if entry is None:
        _say(f"{path}: the entry for {src} -> {dst} is malformed; using the model's choice")
        return None
    plans = ranked(src, dst, cm, entry.top)
    if len(plans) < len(entry.fingerprints) or tuple(fingerprint(p) for p in plans[:len(entry.fingerprints)]) != entry.fingerprints:
        _say(f"{path}: the entry for {src} -> {dst} is stale (the planner's candidates changed since it was "
             "tuned); using the model's choice; run redist.autotune or `redist tune` again to refresh it")
        return None
    return Hit(entry, plans)


def store(path: str, src: ShardingType, dst: ShardingType, cm: CostModel, plans: tuple[Plan, ...], index: int,
          measured_s: tuple[float, ...], top: int, reps: int, margin: float) -> None:
    """Record that ``plans[index]`` won (``plans``: ``ranked(src, dst, cm, top)``) in ``path``: merged
    under a lock with what other writers put there, written atomically; on every process this
    process's table gains the entry, and process 0 alone writes the file."""
    key = move_key(src, dst, cm)
    raw = {"move": json.loads(key), "winner": index, "fingerprints": [fingerprint(p) for p in plans[:index + 1]],
           "top": top, "reps": reps, "margin": margin,
           "measured_s": [None if t != t else t for t in measured_s],  # NaN (nothing timed) as null
           "steps": [_steps_text(p) for p in plans]}
    _table(path)[key] = raw
    _changed()
    if _process_index() == 0:
        _merge_write(path, {key: raw})


def move_key(src: ShardingType, dst: ShardingType, cm: CostModel) -> str:
    """The cache key of a move as canonical JSON (also stored in the entry, for people reading it)."""
    return json.dumps({**_environment(), "mesh": str(src.mesh), "src": str(src), "dst": str(dst),
                       "objective": cm.objective, "cost_model": _digest(repr(cm))},
                      sort_keys=True, separators=(",", ":"))


def fingerprint(plan: Plan) -> str:
    """A digest of a plan's steps: what identifies a candidate across processes and versions."""
    return _digest(repr(plan.steps))


@memo(Scope.MESH, maxsize=1)
def _environment() -> dict[str, Any]:
    import jax

    return {"backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
            "processes": jax.process_count(), "devices_per_process": jax.local_device_count()}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _steps_text(plan: Plan) -> str:
    return " + ".join(type(s).__name__ for s in plan.steps) or "(nothing to do)"


def _process_index() -> int:
    if client() is None:
        return 0
    import jax

    return int(jax.process_index())


def _say(message: str) -> None:
    if message not in _said:
        _said.add(message)
        warnings.warn(message, TuneCacheWarning, stacklevel=3)


def _entry(raw: Any) -> Entry | None:
    try:
        fps = tuple(str(f) for f in raw["fingerprints"])
        e = Entry(int(raw["winner"]), fps, int(raw["top"]), int(raw["reps"]), float(raw["margin"]),
                  tuple(float("nan") if t is None else float(t) for t in raw["measured_s"]))
    except (KeyError, TypeError, ValueError):
        return None
    ok = 0 <= e.winner < e.top and len(fps) == e.winner + 1 and len(e.measured_s) <= e.top
    return e if ok else None


def _table(path: str) -> dict[str, Any]:
    """This process's view of ``path``: read once; under ``jax.distributed`` process 0's copy."""
    global _loads
    if path not in _tables:
        text = _read_text(path) if _process_index() == 0 else ""
        if client() is not None:
            _loads += 1
            text = gather(f"redist-tune-cache-{_loads}", text)[0]
        _tables[path] = _parse(path, text)
    return _tables[path]


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""
    except OSError as e:
        _say(f"{path}: cannot read the autotuning cache ({e}); using the model's choices")
        return ""


def _parse(path: str, text: str, quiet: bool = False) -> dict[str, Any]:
    """The entries of a cache file's text; ``{}`` (and a warning unless ``quiet``) for an empty,
    corrupt or other-format file."""
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
        if not quiet:
            _say(f"{path}: the autotuning cache is not valid JSON of a cache; ignoring it (using the model's "
                 "choices); the next tuning rewrites it")
        return {}
    if doc.get("format") != FORMAT:
        if not quiet:
            _say(f"{path}: the autotuning cache has format {doc.get('format')!r}, this redist reads format "
                 f"{FORMAT}; ignoring it (using the model's choices); the next tuning rewrites it")
        return {}
    return dict(doc["entries"])


def _merge_write(path: str, new: dict[str, Any]) -> None:
    """Add ``new`` to the file's entries: read, merge and atomically replace under an exclusive lock
    on ``path.lock``, so concurrent writers (several processes or hosts on one file system that
    honours ``flock``) each keep the others' entries."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target):
        entries = _parse(path, _read_text(path), quiet=True)
        entries.update(new)
        body = json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)
        fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(body + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    with open(target.with_name(target.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def forget_loaded() -> None:
    """Drop this process's loaded tables, so the next planning call reads the files again (single
    process; under ``jax.distributed`` every process must call it at the same point)."""
    _tables.clear()
    _said.clear()
    _changed()


def _changed() -> None:
    """Plans resolved from an older table (here and in ``redist.reshard``'s memo of moves) go."""
    global _generation
    _generation += 1
    clear([Scope.TYPE])


__all__ = ["ENV", "FORMAT", "Entry", "Hit", "TuneCacheWarning", "active_path", "cached_plan", "forget_loaded",
           "lookup", "move_key", "store", "use_tune_cache"]
