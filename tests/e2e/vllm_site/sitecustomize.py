"""Loaded by the vLLM servers of the e2e rig only (``scripts/e2e-vllm.sh`` puts this
directory on their ``PYTHONPATH``); nothing of the sidecar imports it.

vLLM's CPU build runs its engine loop in one process whose main thread busy-waits for the
worker: ``os.sched_yield()`` in a loop (``vllm/distributed/device_communicators/
shm_broadcast.py``). A thread that calls ``sched_yield`` stays runnable and takes the GIL
straight back, so on 2 cores the other threads of that process, the one that sends outputs
to the API server and the one that receives aborts, get the GIL and the CPU only now and
then. Streams then arrive seconds late, or whole at the end, and a client's disconnect
reaches the engine seconds after it happened. The API server's ``/metrics`` shows the same
lag: it counts what it has received.

Here ``os.sched_yield`` sleeps for 100 µs instead, which blocks the spinning thread and
lets the others run. Measured on this rig (2 cores, the loop model alone, a client that
reads 20 chunks, disconnects and polls ``/metrics``; direct, mode off and mode shadow in
turn): with Python's switch interval shortened to 0.5 ms, this file's earlier remedy,
7 of 18 requests stalled (20 chunks took up to 35 s, or vLLM showed the request running
for up to 4 s after the disconnect); with this sleep alone, 0 of 30 (and 0 of 63 with
both). Worst figures with the sleep: 20 chunks in 0.12 s, idle 0.05 s after the
disconnect, at most 10 tokens generated after it. A 2,000-token stream ran at 260-300
tokens/s with a worst gap of 12 ms between chunks (vLLM's own log showed 280-330 tokens/s
before). This is the CPU build on 2 cores, not the sidecar; the suite's bounds
(``tests/e2e/conftest.py``) still allow for a stall.
"""

import os
import time


def _sleep_instead_of_yield() -> None:
    time.sleep(0.0001)


os.sched_yield = _sleep_instead_of_yield
