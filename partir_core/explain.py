"""``explain()``: what each tactic changed, conflicts, every value's type and every collective."""

from __future__ import annotations

from partir_core.analysis import Analysis
from partir_core.decide import Lowered, Move
from partir_core.ir import Value
from partir_core.propagate import Layout
from partir_core.simulate import simulate


def _lay(layout: Layout) -> str:
    return "[" + ",".join(("@" + ("(" + ",".join(map(str, a)) + ")" if len(a) > 1 else str(a[0]))) if a else "_"
                          for a in layout) + "]"


def _move(mv: Move, names: dict[int, str]) -> list[str]:
    out = [f"      redist {names.get(mv.value, mv.value)}: {mv.src} -> {mv.dst}"]
    for s, t, m in zip(mv.plan.steps, mv.plan.types, mv.plan.measures):
        comm = f"recv {m.recv_bytes:,.0f} B, {m.time_s * 1e6:.1f} us" if m.rounds else "local"
        out.append(f"        {s.kind:<15} -> {t}   ({comm})")
    return out


def _program(low: Lowered, names: dict[int, str], indent: str) -> list[str]:
    """One line per op (bodies of loops and branches indented under their op)."""
    lines: list[str] = []
    for st in low.steps:
        for mv in st.moves:
            lines.extend(indent[:-2] + line for line in _move(mv, names))
        args = ", ".join(f"{names.get(x.id, x)}: {t}" if isinstance(x, Value) and t is not None else str(x)
                         for x, t in zip(st.op.inputs, st.in_types))
        outs = ", ".join(f"{names.get(v.id, v)}: {t}" for v, t in zip(st.op.outputs, st.out_types))
        lines.append(f"{indent}#{st.op.index} {outs} = {st.op.name}({args})  [{st.choice}]")
        for k, body in enumerate(st.bodies):
            ins = ", ".join(f"%{v.id}: {t}" for v, t in zip(body.program.inputs, body.in_types))
            lines.append(f"{indent}  body {k} ({ins}):")
            lines.extend(_program(body, names, indent + "    "))
            for mv in body.out_moves:
                lines.extend(indent + "  " + line for line in _move(mv, names))
    return lines


def explain(a: Analysis) -> str:
    prog, low = a.program, a.lowered
    names = prog.names()
    lines = [f"partitioned over mesh {low.mesh}: {len(prog.ops)} ops, {len(prog.inputs)} inputs"]
    lines.append("")
    lines.append("== tactics (applied in order, each followed by propagation) ==")
    for i, r in enumerate(a.records, 1):
        lines.append(f"{i}. {r.tactic}: set {len(r.set_by_tactic)} input layouts, "
                     f"{len(r.changed)} values changed with propagation")
        for path, lay in r.set_by_tactic:
            lines.append(f"     {path}: {_lay(lay)}")
        named = [(k, lay) for k, lay in r.changed if not names.get(k, "%").startswith(("%", "const"))]
        shown = [(k, lay) for k, lay in named if names[k] not in dict(r.set_by_tactic)]
        inner = len(r.changed) - len(named)
        if shown:
            lines.append("     propagated to: " + ", ".join(f"{names[k]} {_lay(lay)}" for k, lay in shown))
        if inner:
            lines.append(f"     and {inner} intermediate values")
        for note in r.notes:
            lines.append(f"     note: {note}")
    lines.append("")
    lines.append("== conflicts (policy: each value keeps its layout; the op is computed the cheapest "
                 "way and redist moves the rest) ==")
    if not a.conflicts:
        lines.append("none")
    for c in a.conflicts:
        x, y = c.values
        lines.append(f"op #{c.op} {c.prim}: factor {c.factor} is {c.first} in {names.get(x, x)} "
                     f"but {c.second} in {names.get(y, y)}")
    lines.append("")
    lines.append("== inputs ==")
    for v, t in zip(prog.inputs, low.in_types):
        lines.append(f"  {names[v.id]}: {t}")
    lines.append("")
    lines.append("== program (local types per device; [choice] = how the op was laid out) ==")
    lines.extend(_program(low, names, "  "))
    lines.append("== outputs ==")
    for mv in low.out_moves:
        lines.extend(_move(mv, names))
    for path, t in zip(prog.output_paths, low.out_types):
        lines.append(f"  {path}: {t}")
    sim = simulate(low)
    lines.append("")
    lines.append("== simulated cost per device ==")
    wire = (f" ({sim.wire_bytes:,.0f} B as {sim.backend} moves them: bf16 reductions run in f32)"
            if sim.wire_bytes != sim.recv_bytes else "")
    lines.append(f"  flops {sim.flops:,.0f}; peak memory {sim.peak_bytes:,} B; "
                 f"received {sim.recv_bytes:,.0f} B{wire}; communication {sim.comm_time_s * 1e6:.1f} us")
    counts = ", ".join(f"{k} x{n}" for k, n in sorted(sim.counts().items())) or "none"
    lines.append(f"  collectives: {counts}")
    for col in sim.collectives:
        lines.append(f"    {col.kind:<15} {col.recv_bytes:>10,.0f} B {col.time_s * 1e6:>8.1f} us  "
                     f"{col.reason}: {col.src} -> {col.dst}")
    return "\n".join(lines)
