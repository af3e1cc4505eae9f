"""The named benchmark cases: layout changes that real large-model partitionings perform.

Each case is a mesh and two type strings (docs/design.md syntax). Sizes are moderate (a few MB per
global array) so the whole suite runs on a 2-core machine simulating 8 CPU devices; the
*structure* of each move (which axes, which dimensions, which group sizes) is what matters for
the bytes comparison, and is the same as at production scale.

Families:

- ``megatron``: Megatron tensor parallelism / sequence parallelism on activations
  ``[batch, seq, hidden]``: the model axis moving between seq and hidden, and the unreduced
  row-parallel outputs that become sequence-sharded (reduce-scatter) or replicated (all-reduce).
- ``fsdp``: ZeRO-3 / FSDP weight gathers ``(data, model) -> model`` and gradient reduce-scatters.
- ``tp2d``: 2-D tensor-parallel transposes ``(x, y) -> (y, x)``.
- ``moe``: mixture-of-experts dispatch/combine, the expert dimension moving between axes.
- ``fsdp_tp``: FSDP + TP on 3-axis meshes.
- ``size3``: meshes with an axis of size 3 (6 devices).
- ``rank``: ranks 1 and 4 outside the families above.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from spmd_types import Mesh, ShardingType, parse


@dataclass(frozen=True)
class Case:
    """One redistribution to benchmark: ``src -> dst`` on ``mesh``."""

    name: str
    family: str
    mesh_axes: tuple[tuple[str, int], ...]
    src: str
    dst: str
    why: str = ""

    @cached_property
    def mesh(self) -> Mesh:
        return Mesh(self.mesh_axes)

    @cached_property
    def src_type(self) -> ShardingType:
        return parse(self.src, self.mesh)

    @cached_property
    def dst_type(self) -> ShardingType:
        return parse(self.dst, self.mesh)

    @property
    def mesh_text(self) -> str:
        return ",".join(f"{n}={s}" for n, s in self.mesh_axes)

    @property
    def has_unreduced(self) -> bool:
        return bool(self.src_type.unreduced or self.dst_type.unreduced)


def _m(**axes: int) -> tuple[tuple[str, int], ...]:
    return tuple(axes.items())


DM = _m(data=2, model=4)  # data parallel x tensor parallel, 8 devices
XY = _m(x=2, y=4)
YX4 = _m(x=4, y=2)
XYZ = _m(x=2, y=2, z=2)
DFM = _m(data=2, fsdp=2, model=2)  # data x FSDP x TP
EXP8 = _m(expert=8)
DE = _m(data=2, expert=4)
D3 = _m(data=2, model=3)  # a size-3 tensor-parallel axis, 6 devices
X3 = _m(x=3, y=2)

NAMED_CASES: tuple[Case, ...] = (
    # -- Megatron TP / sequence parallelism: activations [batch, seq, hidden] -----------------------
    Case("sp_to_tp_gather_seq", "megatron", DM, "bf16[8@data,512@model,512]", "bf16[8@data,512,512]",
         "SP -> TP: all-gather the sequence before a column-parallel matmul"),
    Case("tp_to_sp_reduce_scatter", "megatron", DM, "bf16[8@data,512,512]{U:model}",
         "bf16[8@data,512@model,512]", "row-parallel matmul output -> sequence-parallel (reduce-scatter)"),
    Case("tp_allreduce", "megatron", DM, "bf16[8@data,512,512]{U:model}", "bf16[8@data,512,512]",
         "plain Megatron: row-parallel output all-reduced"),
    Case("seq_to_hidden", "megatron", DM, "bf16[8@data,512@model,512]", "bf16[8@data,512,512@model]",
         "model axis moves from seq to hidden (all-to-all)"),
    Case("hidden_to_seq", "megatron", DM, "bf16[8@data,512,512@model]", "bf16[8@data,512@model,512]",
         "model axis moves from hidden to seq (all-to-all)"),
    Case("hidden_gather", "megatron", DM, "f32[8@data,256,512@model]", "f32[8@data,256,512]",
         "column-parallel output gathered for a replicated consumer"),
    Case("unreduced_to_hidden", "megatron", DM, "f32[8@data,256,512]{U:model}",
         "f32[8@data,256,512@model]", "partial sums reduce-scattered onto hidden"),
    Case("ulysses_seq_to_heads", "megatron", DM, "f32[4@data,256@model,16,64]",
         "f32[4@data,256,16@model,64]", "rank 4, DeepSpeed-Ulysses: seq-sharded -> head-sharded"),
    Case("ulysses_heads_to_seq", "megatron", DM, "f32[4@data,256,16@model,64]",
         "f32[4@data,256@model,16,64]", "rank 4, Ulysses back: head-sharded -> seq-sharded"),
    Case("sp_full_mesh_gather", "megatron", EXP8, "bf16[4,1024@expert,256]", "bf16[4,1024,256]",
         "sequence parallel over all 8 devices gathered"),
    # -- ZeRO-3 / FSDP ------------------------------------------------------------------------------
    Case("fsdp_gather_data", "fsdp", DM, "f32[1024@(data,model),512]", "f32[1024@model,512]",
         "ZeRO-3 weight gather: (data, model) -> model, data the major axis"),
    Case("fsdp_gather_data_minor", "fsdp", DM, "f32[1024@(model,data),512]", "f32[1024@model,512]",
         "(model, data) -> model: data the minor axis, a plain all-gather"),
    Case("fsdp_gather_2d", "fsdp", DM, "f32[1024@data,512@model]", "f32[1024,512@model]",
         "FSDP over rows, TP over columns: gather the FSDP shard"),
    Case("zero3_full_gather", "fsdp", EXP8, "bf16[2048@expert,512]", "bf16[2048,512]",
         "ZeRO-3 over all 8 devices: full weight gather"),
    Case("zero_grad_reduce_scatter", "fsdp", DM, "f32[1024,512@model]{U:data}",
         "f32[1024@data,512@model]", "FSDP gradient reduce-scatter over data"),
    Case("fsdp_gather_transposed_use", "fsdp", DM, "bf16[1024@(data,model),1024]",
         "bf16[1024,1024@model]", "gather for a transposed (row-parallel) use of the weight"),
    # -- 2-D tensor-parallel transposes ---------------------------------------------------------------
    Case("tp2d_transpose_2x4", "tp2d", XY, "f32[1024@x,1024@y]", "f32[1024@y,1024@x]",
         "2-D TP (x, y) -> (y, x): needs an exchange to meet the bound (docs/design.md section 3)"),
    Case("tp2d_transpose_4x2", "tp2d", YX4, "f32[1024@x,1024@y]", "f32[1024@y,1024@x]",
         "same on the 4x2 mesh"),
    Case("tp2d_flat_order_swap", "tp2d", XY, "f32[2048@(x,y),256]", "f32[2048@(y,x),256]",
         "one dimension over (x, y) -> (y, x): a pure permute"),
    Case("tp2d_dim_swap_flat", "tp2d", XY, "f32[512,1024@(x,y)]", "f32[512@(y,x),1024]",
         "flattened mesh moves dimension and reverses order"),
    Case("tp2d_transpose_3axis", "tp2d", XYZ, "f32[512@(x,y),512@z]", "f32[512@z,512@(y,x)]",
         "3-axis transpose"),
    # -- mixture of experts ----------------------------------------------------------------------------
    Case("moe_dispatch", "moe", EXP8, "f32[8,512@expert,128]", "f32[8@expert,512,128]",
         "[experts, tokens, hidden]: tokens-sharded -> expert-sharded (all-to-all)"),
    Case("moe_combine", "moe", EXP8, "f32[8@expert,512,128]", "f32[8,512@expert,128]",
         "expert-sharded -> tokens-sharded (all-to-all back)"),
    Case("moe_expert_axis_swap", "moe", DE, "bf16[8@data,256@expert,256]", "bf16[8@expert,256@data,256]",
         "expert dimension moves from the data axis to the expert axis"),
    Case("moe_rank4_dispatch", "moe", DE, "f32[4@data,8,128@expert,64]", "f32[4@data,8@expert,128,64]",
         "rank 4 [groups, experts, capacity, hidden]"),
    Case("moe_2d_experts", "moe", DE, "f32[8,512@(data,expert),64]", "f32[8@(data,expert),512,64]",
         "experts over both axes"),
    # -- FSDP + TP on 3-axis meshes -------------------------------------------------------------------
    Case("fsdp_tp_weight_gather", "fsdp_tp", DFM, "f32[1024@(data,fsdp),512@model]",
         "f32[1024,512@model]", "weights sharded over data x fsdp gathered, TP kept"),
    Case("fsdp_tp_fsdp_only_gather", "fsdp_tp", DFM, "f32[1024@(fsdp,data),512@model]",
         "f32[1024@data,512@model]", "gather only the fsdp axis (major)"),
    Case("fsdp_tp_act_reduce_scatter", "fsdp_tp", DFM, "f32[8@(data,fsdp),128,512]{U:model}",
         "f32[8@(data,fsdp),128@model,512]", "TP partial sums -> sequence-parallel, 3 axes"),
    Case("fsdp_tp_act_allreduce", "fsdp_tp", DFM, "bf16[8@(data,fsdp),128,512]{U:model}",
         "bf16[8@(data,fsdp),128,512]", "TP partial sums all-reduced, 3 axes"),
    Case("fsdp_tp_seq_to_hidden", "fsdp_tp", DFM, "f32[8@(data,fsdp),256@model,256]",
         "f32[8@(data,fsdp),256,256@model]", "model axis from seq to hidden, 3 axes"),
    Case("fsdp_tp_grad_reduce_scatter", "fsdp_tp", DFM, "f32[512,512@model]{U:(data,fsdp)}",
         "f32[512@(data,fsdp),512@model]", "gradient reduce-scatter over two axes at once"),
    # -- size-3 axes (6 devices) ----------------------------------------------------------------------
    Case("size3_seq_to_hidden", "size3", D3, "bf16[6@data,384@model,384]", "bf16[6@data,384,384@model]",
         "TP of 3: seq -> hidden"),
    Case("size3_fsdp_gather", "size3", D3, "f32[768@(data,model),384]", "f32[768@model,384]",
         "FSDP gather with a TP axis of 3"),
    Case("size3_transpose", "size3", X3, "f32[384@x,384@y]", "f32[384@y,384@x]",
         "2-D transpose on a 3x2 mesh (XLA rematerializes here)"),
    Case("size3_reduce_scatter", "size3", D3, "f32[6@data,384,384]{U:model}",
         "f32[6@data,384@model,384]", "reduce-scatter over an axis of 3"),
    # -- other ranks -----------------------------------------------------------------------------------
    Case("rank1_order_swap", "rank", XY, "f32[262144@(x,y)]", "f32[262144@(y,x)]",
         "rank 1: (x, y) -> (y, x)"),
    Case("rank1_reduce_scatter", "rank", XY, "f32[131072]{U:y}", "f32[131072@y]",
         "rank 1: partial sums reduce-scattered"),
    Case("rank1_gather_minor", "rank", XY, "f32[262144@(x,y)]", "f32[262144@x]",
         "rank 1: drop the minor axis"),
    Case("rank4_move_two_axes", "rank", XY, "f32[4@x,8@y,64,64]", "f32[4,8,64@y,64@x]",
         "rank 4: both axes move to other dimensions"),
)
"""At least 30 cases (the issue's requirement); names are unique (checked by the tests)."""


def select_cases(cases: tuple[Case, ...], names: list[str] | None) -> tuple[Case, ...]:
    """Cases whose name or family matches one of ``names`` (all when ``names`` is empty)."""
    if not names:
        return cases
    return tuple(c for c in cases if c.name in names or c.family in names)


QUICK_CASES: tuple[str, ...] = (
    "tp_to_sp_reduce_scatter", "seq_to_hidden", "fsdp_gather_data", "tp2d_transpose_2x4",
    "moe_dispatch", "fsdp_tp_act_allreduce", "size3_transpose", "rank1_order_swap",
)
"""The ``--quick`` subset: one or two cases per family, about a minute in all."""
