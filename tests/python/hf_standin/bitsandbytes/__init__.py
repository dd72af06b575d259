# SPDX-License-Identifier: MIT
"""A stand-in for bitsandbytes in the tracing tests: a layer of its name."""
from . import nn  # noqa: F401
