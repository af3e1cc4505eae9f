"""The reverse-mode rule of a move: which move carries the cotangent back.

JAX types a value's cotangent by swapping its unreduced and reduced axes (``to_ct_aval``): the
cotangent of a pending sum is replicated over its axes (reduced), and that of a reduced value is a
pending sum. A move ``src -> dst`` is linear, so its transpose is the move
``dst.cotangent() -> src.cotangent()``, planned like any other (docs/design.md section 2.6).
"""

from __future__ import annotations

from spmd_types import ShardingType

__all__ = ["cotangent_move"]


def cotangent_move(src: ShardingType, dst: ShardingType) -> tuple[ShardingType, ShardingType]:
    """(source, destination) of the move that carries the cotangent of ``src -> dst`` back."""
    return dst.cotangent(), src.cotangent()
