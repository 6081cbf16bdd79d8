"""The delaying proxy's ``--precise`` timer (tests/_delay_proxy.py, ``_ThreadTimer``).

The gateway benchmarks inject a per-event hold through it (issue 37: +1.5 ms per event through a
gateway); a hold that fires early would make a regression look smaller than it is, and one out of
order would reorder a stream's events. No wall-clock threshold: only "never early, in due order".
"""

from __future__ import annotations

import asyncio
import time

from _delay_proxy import _ThreadTimer


def test_thread_timer_resolves_in_due_order_and_never_early() -> None:
    async def main() -> list[tuple[int, int]]:
        timer = _ThreadTimer(asyncio.get_running_loop())
        now = time.monotonic_ns()
        dues = [now + ms * 1_000_000 for ms in (3, 1, 2, 0, -1, 2, 5)]
        got: list[tuple[int, int]] = []

        async def one(due: int) -> None:
            await timer.until(due)
            got.append((time.monotonic_ns(), due))

        await asyncio.gather(*(one(d) for d in dues))
        return got

    got = asyncio.run(main())
    assert len(got) == 7
    assert all(woke >= due for woke, due in got), got
    assert [due for _, due in got] == sorted(due for _, due in got)
