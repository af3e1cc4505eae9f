"""Typed errors of the partitioner; each names the bad input so a schedule can be fixed directly.

They derive from the type layer's errors where the meaning is the same (an axis used twice, an
indivisible dimension), so ``except ShardingTypeError`` catches every user-input problem.
"""

from __future__ import annotations

from spmd_types import DuplicateAxisError, IndivisibleDimensionError, ShardingTypeError


class PartitionError(ShardingTypeError):
    """Base class of partitioner errors (a ``ShardingTypeError``, so a ``ValueError``): catch it for
    any schedule or program the partitioner refuses; the subclass names what and where.

    Example:

    ```pycon
    >>> import jax.numpy as jnp, numpy as np
    >>> from partir_core import Shard, partition
    >>> from spmd_types import Mesh
    >>> def f(x, w):
    ...     return jnp.tanh(x @ w)
    >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
    >>> from partir_core import PartitionError
    >>> try:
    ...     partition(f, Mesh({"data": 2}), [Shard("q", dim=0, axis="data")])(x, w)
    ... except PartitionError as e:
    ...     print(type(e).__name__)
    UnknownInputError

    ```
    """


class UnknownInputError(PartitionError, KeyError):
    """A tactic names a pytree path that is not an input (or output) of the function; the
    message lists the inputs.

    Example:

    ```pycon
    >>> import jax.numpy as jnp, numpy as np
    >>> from partir_core import Shard, partition
    >>> from spmd_types import Mesh
    >>> def f(x, w):
    ...     return jnp.tanh(x @ w)
    >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
    >>> partition(f, Mesh({"data": 2}), [Shard("q", dim=0, axis="data")])(x, w)
    Traceback (most recent call last):
    partir_core.errors.UnknownInputError: no input or output path matches 'q'; inputs are: x, w


    ```
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class AxisUsedTwiceError(PartitionError, DuplicateAxisError):
    """A tactic shards one value over a mesh axis that value already uses.

    Example:

    ```pycon
    >>> import jax.numpy as jnp, numpy as np
    >>> from partir_core import Shard, partition
    >>> from spmd_types import Mesh
    >>> def f(x, w):
    ...     return jnp.tanh(x @ w)
    >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
    >>> twice = [Shard("x", dim=0, axis="data"), Shard("x", dim=1, axis="data")]
    >>> partition(f, Mesh({"data": 2}), twice)(x, w)
    Traceback (most recent call last):
    partir_core.errors.AxisUsedTwiceError: x already uses mesh axis 'data' (dimension 0, layout [@(data),_])...


    ```
    """


class IndivisibleDimError(PartitionError, IndivisibleDimensionError):
    """A tactic shards a dimension whose size its axes do not divide, with ``partition(...,
    uneven="refuse")``. On an input, ``leaf``, ``dim`` and ``multiple`` say which flattened input
    leaf and dimension, and the axes' product (what ``uneven="pad"`` pads it to a multiple of).

    Example:

    ```pycon
    >>> import jax.numpy as jnp, numpy as np
    >>> from partir_core import Shard, partition
    >>> from spmd_types import Mesh
    >>> def f(x, w):
    ...     return jnp.tanh(x @ w)
    >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
    >>> partition(f, Mesh({"model": 4}), [Shard("x", dim=0, axis="model")],
    ...           uneven="refuse")(np.ones((6, 16), np.float32), w)
    Traceback (most recent call last):
    partir_core.errors.IndivisibleDimError: x dimension 0 has size 6, not divisible by 4 (axes model=4)


    ```
    """

    leaf: int | None = None
    dim: int | None = None
    multiple: int | None = None


class TacticError(PartitionError):
    """A malformed tactic (bad dimension index, unknown policy, pinned value...).

    Example:

    ```pycon
    >>> import jax.numpy as jnp, numpy as np
    >>> from partir_core import Shard, partition
    >>> from spmd_types import Mesh
    >>> def f(x, w):
    ...     return jnp.tanh(x @ w)
    >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
    >>> partition(f, Mesh({"data": 2}), [Shard("x", dim=2, axis="data")])(x, w)
    Traceback (most recent call last):
    partir_core.errors.TacticError: x has rank 2 (shape [8, 16]); dimension 2 does not exist


    ```
    """


class UnknownPrimitiveError(PartitionError):
    """The program uses a primitive with no sharding rule (and the policy is ``"error"``).

    Example:

    ```pycon
    >>> import jax.numpy as jnp, numpy as np
    >>> from partir_core import Shard, partition
    >>> from spmd_types import Mesh
    >>> inv = partition(jnp.linalg.inv, Mesh({"data": 2}), [Shard("a", dim=0, axis="data")])
    >>> inv(np.eye(8, dtype=np.float32))
    Traceback (most recent call last):
    partir_core.errors.UnknownPrimitiveError: no sharding rule for primitive 'lu' ...; register one in partir_core.rules.RULES or pass unknown='replicate' to run it on whole arrays

    ```
    """


class UnevenPrimitiveError(IndivisibleDimError):
    """Padding a dimension to a multiple of its axes would change what a primitive computes on it
    (and no mask makes it exact): partition with ``uneven="refuse"`` or shard another dimension.

    Example:

    ```pycon
    >>> import jax.numpy as jnp, numpy as np
    >>> from partir_core import Shard, partition
    >>> from spmd_types import Mesh
    >>> ordered = partition(lambda x: jnp.sort(x, axis=0), Mesh({"data": 4}), [Shard("x", dim=0, axis="data")])
    >>> ordered(np.ones((6, 2), np.float32))
    Traceback (most recent call last):
    partir_core.errors.UnevenPrimitiveError: ...

    ```
    """
