"""Parallelism strategies as schedules of tactics, composable by concatenation.

On a mesh ``{data, model}``: BP shards the batch over ``data``; MP is Megatron over ``model``
(attention heads: wq/wk/wv by head, wo by head; MLP: w1 by column, w2 by row); Z2 shards the Adam
state over ``data`` while pinning parameters whole; Z3 shards the parameters themselves over
``data`` (state follows by propagation); EMB (VP) shards the embedding table's rows over
``model``; SP shards the sequence over ``model`` (Megatron-SP, with MP). On the Llama-style
models MP shards the query heads of grouped-query attention (the KV heads follow: over the axis
when it divides them, otherwise each replicated on its query group's devices) and SwiGLU's three
matrices, and on the mixture of experts it splits every expert's SwiGLU the same way. EP (the
mixture of experts only) is expert parallelism: the experts over ``data`` and the tokens sent to
them by all-to-all (``ShardExperts``).
ZeRO is defined on top of data parallelism, so ``Z2`` and ``Z3`` include BP.
"""

from __future__ import annotations

from partir_core.tactics import Pin, Shard, ShardExperts, ShardParams, Tactic

MEGATRON: dict[str, dict[str, int]] = {
    "mlp": {"params/w1": 1, "params/w2": 0},
    "transformer": {"params/wq": 1, "params/wk": 1, "params/wv": 1, "params/wo": 0,
                    "params/w1": 1, "params/w2": 0},
    # stacked layers: dimension 0 is the layer, so each Megatron dimension is one further
    "gpt": {"params/blocks/wq": 2, "params/blocks/wk": 2, "params/blocks/wv": 2, "params/blocks/wo": 1,
            "params/blocks/w1": 2, "params/blocks/b1": 1, "params/blocks/w2": 1},
    # grouped-query attention: query heads by head; propagation through the grouping reshape
    # gives the KV heads the axis when it divides them, and otherwise a sub-axis (each KV head on
    # the devices of its query group). SwiGLU: gate and up by column, down by row
    "llama": {"params/blocks/wq": 2, "params/blocks/wo": 1,
              "params/blocks/w_gate": 2, "params/blocks/w_up": 2, "params/blocks/w_down": 1},
    # each expert's SwiGLU split Megatron-style (expert weights are (layer, expert, in, out))
    "moe": {"params/blocks/wq": 2, "params/blocks/wo": 1,
            "params/blocks/w_gate": 3, "params/blocks/w_up": 3, "params/blocks/w_down": 2},
}
SEQUENCE_MODELS = ("gpt", "llama", "moe")
"""Models with a token sequence (SP applies) and an embedding table (VP applies)."""
UNTIED = ("llama", "moe")
"""Models whose output projection ``unembed`` (d_model, vocab) is separate from ``embed``."""


def bp(model: str) -> list[Tactic]:
    return [Shard("batch", dim=0, axis="data")]


def mp(model: str) -> list[Tactic]:
    return [Shard(MEGATRON[model], axis="model")]


def z2(model: str) -> list[Tactic]:
    return [Pin("params", "out/0"), ShardParams(axis="data", policy="largest_dim", target="opt_state")]


def z3(model: str) -> list[Tactic]:
    return [ShardParams(axis="data", policy="largest_dim")]


def sp(model: str) -> list[Tactic]:
    """Megatron sequence parallelism: the token sequence over ``model``, so LayerNorm, dropout
    and the residual stream stay sequence-sharded, and with MP the lowering all-gathers the
    sequence before each tensor-parallel block and reduce-scatters after it."""
    if model not in SEQUENCE_MODELS:
        raise KeyError(f"SP needs a sequence dimension; model {model!r} has none")
    return [Shard({"batch/tokens": 1, "batch/labels": 1}, axis="model")]


def emb(model: str) -> list[Tactic]:
    """The embedding table by vocabulary rows over ``model`` (and an untied output projection
    by its vocabulary columns)."""
    if model not in ("transformer", *SEQUENCE_MODELS):
        raise KeyError(f"EMB needs an embedding table; model {model!r} has none")
    if model in UNTIED:
        return [Shard({"params/embed": 0, "params/unembed": 1}, axis="model")]
    return [Shard("params/embed", dim=0, axis="model")]


EXPERTS = {"params/blocks/w_gate": 1, "params/blocks/w_up": 1, "params/blocks/w_down": 1}
"""The expert dimension of the mixture's stacked expert weights (layer, expert, in, out)."""


def ep(model: str) -> list[Tactic]:
    """Expert parallelism as GShard/Switch run it: the experts over ``data`` (each device holds
    its experts' weights and optimizer state), tokens dispatched to them and combined back by
    all-to-all. After BP it moves ``data`` from the batch to the expert dimension of the expert
    computation (``ShardExperts``)."""
    if model != "moe":
        raise KeyError(f"EP needs experts; model {model!r} has none")
    return [ShardExperts(EXPERTS, axis="data")]


STRATEGIES: dict[str, list[str]] = {
    "BP": ["BP"], "MP": ["MP"], "Z2": ["BP", "Z2"], "Z3": ["BP", "Z3"], "EMB": ["EMB"],
    "BP+MP": ["BP", "MP"], "BP+MP+Z3": ["BP", "MP", "Z3"],
    "BP+MP+SP": ["BP", "MP", "SP"], "BP+MP+VP": ["BP", "MP", "VP"], "BP+MP+SP+VP": ["BP", "MP", "SP", "VP"],
    "BP+EP": ["BP", "EP"], "BP+MP+EP": ["BP", "MP", "EP"], "BP+MP+SP+EP": ["BP", "MP", "SP", "EP"],
    "BP+MP+Z3+EP": ["BP", "MP", "Z3", "EP"],
}
# vocabulary parallelism: the (tied) embedding table by rows over ``model``: masked lookups,
# vocab-sharded logits, a loss by all-reduce(max), all-reduce(sum) and a masked label lookup
_PARTS = {"BP": bp, "MP": mp, "Z2": z2, "Z3": z3, "EMB": emb, "SP": sp, "VP": emb, "EP": ep}


def schedule(model: str, strategy: str) -> list[Tactic]:
    """The tactics of ``strategy`` (a name in ``STRATEGIES`` or parts joined by ``+``) for ``model``."""
    parts = STRATEGIES.get(strategy, strategy.split("+"))
    # EP goes last: it moves ``data`` off the batch of the expert computation, which BP must have
    # sharded first (applied before it, its layout would spread into the router instead)
    parts = sorted(parts, key=lambda p: p == "EP")
    out: list[Tactic] = []
    for p in parts:
        if p not in _PARTS:
            raise KeyError(f"unknown strategy part {p!r}; known: {sorted(_PARTS)}")
        out += _PARTS[p](model)
    return out


def applicable(model: str) -> list[str]:
    out = []
    for s in STRATEGIES:
        parts = set(STRATEGIES[s])
        if (parts & {"SP", "VP"} and model not in SEQUENCE_MODELS or "EMB" in parts and model == "mlp"
                or "EP" in parts and model != "moe"):
            continue
        out.append(s)
    return out
