"""Measured cost profiles: what ``redist calibrate`` writes and ``load_cost_model`` loads.

A profile is JSON: the backend it was measured on, per step kind a fitted ``KindCost``
(``overhead + latency_terms * latency + recv_bytes / bandwidth``), the local copy bandwidth, and
the raw samples the fit came from (so a fit can be re-checked or redone). Why fitted per kind:
on one backend the kinds differ by far more than the alpha-beta model's shared constants say
(XLA:CPU runs a reduce-scatter as an all-reduce plus a slice; a ``collective-permute`` round costs
a rendezvous of every device), and the planner must rank plans by what they cost *there*.

A profile for the CPU backend ships with the package (``redist/profiles/cpu.json``) and is the
default cost model of ``redistribute`` when JAX runs on CPU (``default_cost_model``); across
processes on CPU (``jax.distributed``, Gloo) the shipped Gloo profiles are (``runtime_profile``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from redist.atoms import primes
from redist.cost import CostModel, KindCost
from redist.errors import RedistError
from redist.objective import Objective, as_objective
from spmd_types import Axis, SubAxis
from spmd_types.memo import Scope, memo

PROFILE_DIR = Path(__file__).parent / "profiles"
FORMAT = 2
"""2: kinds and samples carry what a step writes in short rows (``KindCost.strided_s_per_byte``,
``run_s``; ``Sample.strided_bytes``, ``runs``). Format 1 files still load, without those terms."""
READABLE_FORMATS = (1, 2)


class Sample(NamedTuple):
    """One timed step: its kind, latency terms (``phases * ceil(log2 p)`` or rounds), bytes each
    device receives, and the median seconds it added to an empty program."""

    kind: str
    latency_terms: float
    recv_bytes: float
    seconds: float
    cross: bool = False
    """Timed over a group spanning processes (``redist calibrate`` under ``jax.distributed``)."""
    strided_bytes: float = 0.0
    """Bytes the step writes as pieces narrower than the new block's rows (``redist.measure.written``)."""
    runs: float = 0.0
    """The rows those pieces form."""


@dataclass(frozen=True)
class Profile:
    backend: str
    device_kind: str
    kinds: tuple[tuple[str, KindCost], ...]
    copy_Bps: float
    samples: tuple[Sample, ...] = ()
    cross_kinds: tuple[tuple[str, KindCost], ...] = ()
    """Per kind, the fit over groups that span processes (empty for a one-process profile)."""

    def cost_model(self, objective: str = "measured", cross_axes: Sequence[Axis] | None = None) -> CostModel:
        """The planner's model, ties within ``fit_error``. With cross-process costs, ``cross_axes``
        names the mesh axes whose groups span processes (``process_crossing_axes``); ``None``
        charges every axis as crossing."""
        tol = self.fit_error
        if self.cross_kinds and cross_axes is None:
            return CostModel(objective=objective, kind_costs=self.cross_kinds, copy_Bps=self.copy_Bps,
                             tie_tolerance=tol)
        return CostModel(objective=objective, kind_costs=self.kinds, copy_Bps=self.copy_Bps,
                         cross_axes=tuple(sorted(cross_axes or (), key=str)), cross_kind_costs=self.cross_kinds,
                         tie_tolerance=tol)

    @cached_property
    def fit_error(self) -> float:
        """The fitted model's typical relative error on its own samples: ``exp(median |log(predicted
        / measured)|) - 1``, each sample against its own fit (in-process or across processes);
        0 without samples. The planner's tie tolerance (``CostModel.tie_tolerance``)."""
        fits = {False: dict(self.kinds), True: dict(self.cross_kinds)}
        errs = [abs(math.log(predict(fits[s.cross][s.kind], s) / max(s.seconds, 1e-7)))
                for s in self.samples if s.kind in fits[s.cross]]
        return float(min(math.expm1(statistics.median(errs)), MAX_TIE_TOLERANCE)) if errs else 0.0

    def to_json(self) -> str:
        d = asdict(self)
        d["format"] = FORMAT
        d["kinds"] = {k: KindCost(*v)._asdict() for k, v in self.kinds}
        d["samples"] = [Sample(*s)._asdict() for s in self.samples]
        d["cross_kinds"] = {k: KindCost(*v)._asdict() for k, v in self.cross_kinds}
        return json.dumps(d, indent=1)

    @staticmethod
    def from_json(text: str) -> Profile:
        d = json.loads(text)
        if d.get("format") not in READABLE_FORMATS:
            raise ValueError(f"profile format {d.get('format')!r} is not one of {READABLE_FORMATS}: "
                             "rerun `redist calibrate`")
        kinds = tuple(sorted((k, KindCost(**v)) for k, v in d["kinds"].items()))
        samples = tuple(Sample(**s) for s in d.get("samples", ()))
        cross = tuple(sorted((k, KindCost(**v)) for k, v in d.get("cross_kinds", {}).items()))
        return Profile(d["backend"], d.get("device_kind", ""), kinds, float(d["copy_Bps"]), samples, cross)


MAX_TIE_TOLERANCE = 0.5
"""A profile whose fit misses its samples by more than this is not trusted to break ties wider."""


def predict(kc: KindCost, s: Sample) -> float:
    """A fit's seconds for a sample (floored at 0.1 us: a log error needs a positive figure)."""
    return max(kc.overhead_s + s.latency_terms * kc.latency_s + s.recv_bytes / kc.bandwidth_Bps
               + s.strided_bytes * kc.strided_s_per_byte + s.runs * kc.run_s, 1e-7)


class ProfileError(RedistError):
    """A cost profile file that cannot be read as one."""


def load_profile(path: str | Path) -> Profile:
    """Read a profile; a file that is not one raises ``ProfileError`` naming it and what to do."""
    try:
        return Profile.from_json(Path(path).read_text())
    except OSError as e:  # missing, a directory, unreadable
        raise ProfileError(f"cannot read cost profile {path} ({e.strerror or type(e).__name__}); write one with "
                           f"`redist calibrate --out {path}`") from None
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise ProfileError(f"{path} is not a redist cost profile ({type(e).__name__}: {e}); write one with "
                           f"`redist calibrate --out {path}`") from None


def load_cost_model(path: str | Path, objective: str = "measured") -> CostModel:
    """The cost model of a profile written by ``redist calibrate`` (objective ``measured``, or
    ``bytes``: least bytes first, ties by the measured time): pass it to ``redistribute``."""
    return load_profile(path).cost_model(objective)


@memo(Scope.MESH, maxsize=8)
def packaged_profile(backend: str) -> Profile | None:
    """The profile shipped for ``backend`` (``"cpu"``), if any."""
    path = PROFILE_DIR / f"{backend}.json"
    return load_profile(path) if path.exists() else None


def runtime_profile_name() -> str:
    """The shipped profile for how JAX runs now: ``"cpu-gloo"`` on CPU across processes
    (``jax.distributed``, Gloo collectives over sockets), else the backend's name (``"cpu"``)."""
    import jax

    backend = jax.default_backend()
    return f"{backend}-gloo" if backend == "cpu" and jax.process_count() > 1 else backend


def runtime_profile() -> Profile | None:
    """The shipped profile closest to how JAX runs now: across ``N`` processes on CPU
    ``cpu-gloo-N.json`` (measured with ``N`` processes: Gloo rounds cost more the more processes
    share the cores), else ``cpu-gloo.json`` (2 processes), else the backend's (``cpu.json``)."""
    import jax

    name = runtime_profile_name()
    names = (f"{name}-{jax.process_count()}", name) if name.endswith("-gloo") else (name,)
    for candidate in (*names, jax.default_backend()):
        prof = packaged_profile(candidate)
        if prof is not None:
            return prof
    return None


def process_crossing_axes(mesh: Any) -> tuple[Axis, ...]:
    """Axes of ``mesh`` (ours, laid out row-major over ``jax.devices()`` as plans run it, or a
    ``jax.sharding.Mesh``) along which the process of a device changes: their groups span processes.
    Where only some prime factors of an axis change it, those factors, as sub-axes: on 4 processes
    of 2 devices a 4-device axis ``y`` crosses by ``y:(1)2`` only, and a group over ``y:(2)2`` stays
    in a process (charged as crossing, such all-to-alls lost a 4-process plan to a slower exchange)."""
    import jax

    jm = mesh if isinstance(mesh, jax.sharding.Mesh) else mesh.to_jax()
    return crossing_axes(np.vectorize(lambda d: d.process_index)(jm.devices), jm.axis_names)


def crossing_axes(procs: np.ndarray, names: Sequence[str]) -> tuple[Axis, ...]:
    """``process_crossing_axes`` of a layout given as its process per device (``procs``, one array
    dimension per axis of ``names``): planning studies of a multi-host mesh no process runs, such as
    ``redist bench-plan --ladder --profile cpu-gloo``'s hosts of 8 devices."""
    if procs.ndim != len(names):
        raise RedistError(f"a process per device needs one array dimension per mesh axis: got shape "
                          f"{procs.shape} for axes {tuple(names)}; reshape it to the mesh's axis sizes")
    return tuple(a for i, name in enumerate(names) for a in _crossing_factors(procs, i, name))


def _crossing_factors(procs: np.ndarray, i: int, name: str) -> list[Axis]:
    """Axis ``i`` of ``procs`` (process per device) split into prime digits, major first; the runs
    of digits along which the process changes, as sub-axes (the whole name if every digit does)."""
    digits = primes(procs.shape[i])
    split = procs.reshape(procs.shape[:i] + tuple(digits) + procs.shape[i + 1:])
    changes = [bool((np.diff(split, axis=i + j) != 0).any()) for j in range(len(digits))]
    if changes and all(changes):
        return [name]
    out: list[Axis] = []
    for j, change in enumerate(changes):
        if not change:
            continue
        if j and changes[j - 1]:  # extends the previous run
            prev = out.pop()
            assert isinstance(prev, SubAxis)
            out.append(SubAxis(name, prev.pre, prev.size * digits[j]))
        else:
            out.append(SubAxis(name, math.prod(digits[:j]), digits[j]))
    return out


def default_cost_model(mesh: Any = None) -> CostModel:
    """``redistribute``'s default: fastest under the measured model of the running backend (the
    shipped profile, ``runtime_profile_name``), memory bound hard, bytes the tie-break; the
    unmeasured alpha-beta model (objective ``alpha-beta``) where no profile ships for the backend.
    With ``mesh``, a cross-process profile charges its cross costs to the axes that span processes;
    without, to every axis."""
    prof = runtime_profile()
    if prof is None:
        return CostModel(objective="alpha-beta")
    import jax

    known = mesh is not None and prof.cross_kinds and mesh.size <= jax.device_count()
    return prof.cost_model("measured", process_crossing_axes(mesh) if known else None)


def cost_model_for(objective: Objective | str = Objective.MEASURED, mesh: Any = None) -> CostModel:
    """The cost model ``redistribute`` uses for ``objective`` on ``mesh``: ``measured`` is the running
    backend's shipped profile (``redist.profile.default_cost_model``; where none ships for the
    backend, the alpha-beta model, and the model's objective says ``alpha-beta``), ``bytes`` and
    ``alpha-beta`` the alpha-beta constants ranked by bytes or by time.

    Examples:
        >>> import redist
        >>> redist.cost_model_for("bytes").objective, redist.cost_model_for("alpha-beta").objective
        ('bytes', 'alpha-beta')
        >>> redist.cost_model_for("time")
        Traceback (most recent call last):
        redist.errors.CostModelError: objective 'time' is not one of measured, bytes, alpha-beta...

    Raises:
        CostModelError: an objective that is not a ``redist.Objective`` or one of its names.
    """
    o = as_objective(objective)
    if o is Objective.MEASURED:
        return default_cost_model(mesh)
    return CostModel(objective=o)


def regressors(samples: Sequence[Sample]) -> np.ndarray:
    """The fit's columns per sample: (1, latency terms, bytes, strided bytes, runs)."""
    return np.array([[1.0, s.latency_terms, s.recv_bytes, s.strided_bytes, s.runs]
                     for s in samples]).reshape(len(samples), N_COEF)


N_COEF = 5


def kind_cost(coef: Sequence[float] | np.ndarray) -> KindCost:
    """A ``KindCost`` from fitted (overhead, latency, 1 / bandwidth, per strided byte, per run)."""
    inv_bw = coef[2] if coef[2] > 0 else 1e-15
    return KindCost(float(coef[0]), float(coef[1]), float(1.0 / inv_bw), float(coef[3]), float(coef[4]))


def fit_kind(samples: Sequence[Sample]) -> KindCost:
    """Least squares of ``seconds ~ overhead + terms * latency + bytes / bandwidth + strided bytes *
    strided_s_per_byte + runs * run_s`` in relative error, coefficients kept non-negative (a negative one is dropped and the rest
    refitted; a column that is all 0, such as runs for kinds timed without them, fits 0)."""
    x = regressors(samples)
    cols = [x[:, i] for i in range(N_COEF)]
    y = np.array([s.seconds for s in samples])
    w = 1.0 / np.maximum(y, 1e-6)  # relative errors: small moves rank as well as large ones
    active = [i for i in range(N_COEF) if i < 3 or cols[i].any()]
    coef = np.zeros(N_COEF)
    while active:
        a = np.stack([cols[i] for i in active], axis=1)
        sol, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return kind_cost(coef)


def fit_profile(backend: str, device_kind: str, samples: Sequence[Sample], copy_Bps: float) -> Profile:
    kinds = sorted({s.kind for s in samples})
    fitted = tuple((k, fit_kind([s for s in samples if s.kind == k])) for k in kinds)
    return Profile(backend, device_kind, fitted, copy_Bps, tuple(samples))


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    if len(a) != len(b) or len(a) < 2:
        return math.nan

    def ranks(v: Sequence[float]) -> np.ndarray:
        x = np.asarray(v, dtype=float)
        order = np.argsort(x, kind="mergesort")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for val in np.unique(x):
            idx = x == val
            r[idx] = r[idx].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


__all__ = ["Profile", "Sample", "cost_model_for", "default_cost_model", "fit_kind", "fit_profile", "predict", "ProfileError", "load_cost_model", "load_profile",
           "packaged_profile", "process_crossing_axes", "runtime_profile", "runtime_profile_name", "spearman"]
