"""The Inductor adapter: carries out the policy inside ``torch.compile``.

Under ``torch.compile`` a ``@triton.autotune`` kernel never reaches Triton's ``Autotuner.run``:
Inductor re-emits it under a ``CachingAutotuner``, which times every config at its first run
(``autotune_to_one_config``), as it does for its own generated kernels. ``patch(heuristics_module)``,
the post-import hook of ``torch._inductor.runtime.triton_heuristics``, puts the guard's step there
(``install``); how each mode chooses is ``step``; what a compiled kernel is called is ``names``;
every read of Inductor's internals goes through ``seam``.
"""

from __future__ import annotations

from .install import patch

__all__ = ["patch"]
