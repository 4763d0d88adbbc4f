"""The memprof dashboard: a FastAPI app over a runs directory (see docs/dashboard.md).

It renders reports; it does not know how tensors are computed. `create_app` builds it.
"""

from web.app import create_app

__all__ = ["create_app"]
