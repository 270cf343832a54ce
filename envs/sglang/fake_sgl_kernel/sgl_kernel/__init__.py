"""FakeSglKernel: a stand-in for sgl_kernel, SGLang's native kernel module, which no CPU wheel provides.

SGLang 0.5.23's CPU path (``SGLANG_USE_CPU_ENGINE=1 --device cpu``) imports the functions below at
module level; on a CPU without AVX-512/AMX SGLang serves with its torch_native attention backend and
never calls them (servelab's tests check the server log for that). Each one, if called anyway,
writes ``FakeSglKernel: sgl_kernel.NAME was called`` to stderr (the server log) and raises
:class:`FakeSglKernelCalled`. Everything else is absent, so SGLang's own ``except ImportError``
fallbacks (``scalar_type``, ``allreduce``, ...) apply as they would without the module.

Found by starting the tiny server with a module that recorded every name asked of it
(assign_*, copy_all_layer_kv_cache_cpu, fill_*, build_tree_kernel_efficient_cpu, verify_tree_greedy_cpu).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn

#: What SGLang 0.5.23 imports from sgl_kernel on its CPU path (mem_cache/allocation.py, kvcache
#: cache_move.py, speculative spec_tree.py and its CPU helpers).
NAMES = (
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
)
#: The line a call leaves in the server log.
CALLED = "FakeSglKernel: sgl_kernel.{name} was called"


class FakeSglKernelCalled(RuntimeError):
    """A stand-in kernel was called: this machine has no real sgl_kernel to run it."""


def _stand_in(name: str) -> Callable[..., NoReturn]:
    def stand_in(*args: Any, **kwargs: Any) -> NoReturn:
        print(CALLED.format(name=name), file=sys.stderr, flush=True)
        raise FakeSglKernelCalled(f"sgl_kernel.{name} is a stand-in (FakeSglKernel): no native SGLang kernels on this machine")

    stand_in.__name__ = stand_in.__qualname__ = name
    return stand_in


for _name in NAMES:
    globals()[_name] = _stand_in(_name)
del _name
