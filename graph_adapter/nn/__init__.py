"""The nn stage: what runs inside the wrapped forward, ``ipu_wrap`` and the ops it makes static.

One module a job:

* :mod:`~graph_adapter.nn.wrap`: :func:`ipu_wrap` (binding the flat dict to the
  model's arguments, rebuilding the PyG batch, trimming eager calls to the real
  rows: ``_inputs``, ``_trim``) and :func:`unpad` of a wrapped model's outputs;
* :mod:`~graph_adapter.nn.static`: the static-size substitutions for PyG's ops,
  with the stand-ins of :mod:`~graph_adapter.nn.stand_ins`' one list
  (``static_geometry``, ``static_scatter``, ``static_index``, ``static_layout``);
* :mod:`~graph_adapter.nn.norm`: BatchNorm and friends over real rows;
* :mod:`~graph_adapter.nn.losses`, :mod:`~graph_adapter.nn.link_losses`: masked losses;
* :mod:`~graph_adapter.nn.host_model`: :class:`HostModel`, the interface every runner of a
  wrapped model on the host subclasses (compiled, loaded, poptorch, emulated).

It may import :mod:`graph_adapter.format`, :mod:`graph_adapter.batching`,
:mod:`graph_adapter.sampling`, torch and PyG; never ``ipu``, ``checker``,
``backends``, ``lightning`` or ``app``.
"""
from . import losses
from .wrap import (AmbiguousLevelError, InputValueError, IPUWrapped, MissingInputError, TrimError,
                   UnboundInputError, ipu_wrap, unpad, unwrap)
from .static import StaticSizeError
from .norm import MaskedBatchNorm1d, mask_norms, masked_batch_norm
from .losses import (MaskedLoss, global_mean_scale, masked_bce_with_logits,
                     masked_cross_entropy, masked_l1_loss, masked_loss, masked_mean,
                     masked_mse_loss)
from .link_losses import link_loss, masked_link_bce, masked_triplet_bce
from .host_model import HostModel

__all__ = ["ipu_wrap", "IPUWrapped", "unpad", "AmbiguousLevelError", "InputValueError",
           "MissingInputError", "TrimError", "UnboundInputError", "StaticSizeError",
           "MaskedBatchNorm1d", "mask_norms", "masked_batch_norm", "losses", "masked_loss",
           "masked_mean", "masked_mse_loss", "masked_l1_loss", "masked_bce_with_logits",
           "masked_cross_entropy", "link_loss", "masked_link_bce", "masked_triplet_bce",
           "HostModel", "MaskedLoss", "global_mean_scale", "unwrap"]
