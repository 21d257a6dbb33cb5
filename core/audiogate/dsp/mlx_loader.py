"""Import a family's optional MLX kernel, or say how to get MLX.

A family's MLX module (``audiogate_<family>.mlx_logmel``) imports ``mlx.core`` at its top,
so the numpy path never needs MLX; the feature stage and the collate stage import it only
when ``policy.feature_backend == "mlx"``, through :func:`load_mlx_module`, which turns a
missing MLX into the same typed error in every family
(:class:`~audiogate.errors.MissingExtraError`). Importing this module does not
import MLX.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from audiogate.errors import PluginError
from audiogate.extras import require_module

__all__ = ["load_mlx_module"]


def load_mlx_module(module: str, *, family: str, clip_index: int | None = None) -> ModuleType:
    """The module named ``module``, imported on first use of the mlx backend.

    :param module: its full name (``"audiogate_phi4mm.mlx_logmel"``).
    :param family: the family name the error message gives.
    :param clip_index: the clip being processed, named in the error message if given.
    :raises MissingExtraError: MLX cannot be imported here (the message says how to
        install it, or to select ``feature_backend='numpy'``).
    :raises PluginError: MLX imports but the family's module does not.
    """
    where = "" if clip_index is None else f" (clip {clip_index + 1})"
    require_module(
        "mlx.core",
        purpose=f"the mlx feature backend of family {family!r}{where}",
        extra="mlx",
        hint="on Linux also `pip install 'mlx[cpu]'`; or select feature_backend='numpy'",
    )
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise PluginError(
            f"the mlx feature backend of family {family!r} cannot be used{where}: its module "
            f"{module!r} does not import: {exc}"
        ) from exc
