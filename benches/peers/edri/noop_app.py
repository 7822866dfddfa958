"""EDRI noop app for benches/run: GET /noop answered by one Manager whose handler sets one response field.

Usage: python noop_app.py PORT   (binds 127.0.0.1). EDRI reads its EDRI_* settings at import time, so they
are set before importing edri.
"""
import logging
import os
import sys

os.environ["EDRI_PORT"] = sys.argv[1] if len(sys.argv) > 1 else "18000"
os.environ.setdefault("EDRI_HOST", "127.0.0.1")
os.environ.setdefault("ENVIRONMENT", "production")

from http import HTTPMethod  # noqa: E402

from edri import EDRI  # noqa: E402
from edri.abstract import ManagerBase, request  # noqa: E402
from edri.api.dataclass.api_event import api  # noqa: E402
from edri.config.constant import ApiType  # noqa: E402
from edri.dataclass.event import Event  # noqa: E402
from edri.dataclass.response import Response, response  # noqa: E402


@response
class NoopResponse(Response):
    ok: bool


@api(url="/noop", method=HTTPMethod.GET, resource="noop", exclude={ApiType.HTML})
class Noop(Event):
    response: NoopResponse


class NoopManager(ManagerBase):
    @request
    def noop(self, event: Noop) -> None:
        # Setting a field is the whole handler; it also marks the response OK.
        event.response.ok = True


if __name__ == "__main__":
    # EDRI sets uvicorn's loggers to DEBUG; access logs at 1k req/s would measure the terminal, not EDRI.
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)
    edri = EDRI()
    edri.add_component(NoopManager())
    edri.start_api()
    edri.run()
