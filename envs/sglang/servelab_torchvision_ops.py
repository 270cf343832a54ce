"""Declare torchvision's two C++ op schemas before PyPI's (CUDA-built) torchvision loads beside CPU torch.

Without them `import torchvision` fails with "operator torchvision::nms does not exist", and SGLang's
argument resolution imports torchvision.transforms. Only the schemas are declared: the ops stay
unimplemented, so anything that really calls nms still fails loudly. Loaded from a .pth file, it waits
for the first `import torchvision` instead of importing torch into every interpreter.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any


class _DeclareTorchvisionOps(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        globals()["_LIBRARY"] = lib  # keep the registration alive
        return None


def install() -> None:
    if not any(isinstance(f, _DeclareTorchvisionOps) for f in sys.meta_path):
        sys.meta_path.insert(0, _DeclareTorchvisionOps())
