"""Arrow types as bucketloader measures them, shared by the engines and the datasets helpers.

pyarrow is an optional package: it is imported inside the functions, never when this module is.
"""

from __future__ import annotations

from typing import Any


def is_list(t: Any) -> bool:
    """Does the Arrow type ``t`` hold lists (plain, large, fixed-size or a list view), whose
    length is the number of their values?

    Example:
        >>> import pyarrow as pa
        >>> is_list(pa.large_list(pa.int32())), is_list(pa.string())
        (True, False)
    """
    import pyarrow as pa

    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or getattr(pa.types, "is_list_view", lambda _: False)(t)
        or getattr(pa.types, "is_large_list_view", lambda _: False)(t)
    )
