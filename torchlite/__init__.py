"""torchlite: torch.compile rebuilt around a C++ core."""

from torchlite import _C  # noqa: F401
