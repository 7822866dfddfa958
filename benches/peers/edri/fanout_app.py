"""EDRI fan-out app for benches/run's `fanout` section: POST /fan (a 64-byte JSON order) is one event type that
four Managers subscribe to (EDRI's router sends every event to every component subscribed to its requests).
The first Manager answers it (an HTTP client needs an answer); the other three take it and answer nothing.

Each Manager counts the events it took in a slot of its own of a shared counter file (FANOUT_COUNTS, four
little-endian u64, written through mmap: no system call per event), so benches/run counts deliveries where
they land, as it does for Switchyard's subscribers.

Usage: FANOUT_COUNTS=/path/counts python fanout_app.py PORT   (binds 127.0.0.1)
"""
import logging
import mmap
import os
import struct
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

COUNTS = os.environ["FANOUT_COUNTS"]
SUBSCRIBERS = 4


@response
class FanResponse(Response):
    ok: bool


@api(url="/fan", method=HTTPMethod.POST, resource="fan", exclude={ApiType.HTML})
class Fan(Event):
    order: int
    customer: str
    amount: float
    currency: str
    response: FanResponse


class Counter:
    """One slot of the counter file, opened in the Manager's own process on its first event."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.n = 0
        self.mm: mmap.mmap | None = None

    def add(self) -> None:
        if self.mm is None:
            with open(COUNTS, "r+b") as f:
                self.mm = mmap.mmap(f.fileno(), 8 * SUBSCRIBERS)
        self.n += 1
        struct.pack_into("<Q", self.mm, 8 * self.slot, self.n)


class Subscriber0(ManagerBase):
    counter = Counter(0)

    @request
    def fan(self, event: Fan) -> None:
        self.counter.add()
        event.response.ok = True


class Subscriber1(ManagerBase):
    counter = Counter(1)

    @request
    def fan(self, event: Fan) -> None:
        self.counter.add()


class Subscriber2(ManagerBase):
    counter = Counter(2)

    @request
    def fan(self, event: Fan) -> None:
        self.counter.add()


class Subscriber3(ManagerBase):
    counter = Counter(3)

    @request
    def fan(self, event: Fan) -> None:
        self.counter.add()


if __name__ == "__main__":
    with open(COUNTS, "wb") as f:
        f.write(bytes(8 * SUBSCRIBERS))
    # EDRI sets uvicorn's loggers to DEBUG; access logs at 1k req/s would measure the terminal, not EDRI.
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)
    edri = EDRI()
    for manager in (Subscriber0(), Subscriber1(), Subscriber2(), Subscriber3()):
        edri.add_component(manager)
    edri.start_api()
    edri.run()
