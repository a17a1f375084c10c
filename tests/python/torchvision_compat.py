"""Lets timm/transformers import when torchvision's C ops cannot load; shared by
tests/python/conftest.py and bench/model_corpus.py (which puts this folder on sys.path)."""

import glob
import importlib.util
import os
import sys
import types

import torch


def work_around_mismatched_torchvision() -> None:
    """NOTE: a torchvision wheel built for CUDA next to a CPU-only torch fails at import time
    (`operator torchvision::nms does not exist`) while registering fake kernels for ops whose
    library never loaded. timm imports torchvision unconditionally. Pre-seeding that one
    registration module lets the pure-Python rest of torchvision import; the models under test
    never call torchvision's C ops.
    """
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    libs = glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*.so"))
    if not libs:
        return
    try:
        torch.ops.load_library(libs[0])
    except OSError:
        name = "torchvision._meta_registrations"
        sys.modules.setdefault(name, types.ModuleType(name))
