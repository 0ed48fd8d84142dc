"""Loaded by the vLLM servers of the e2e rig only (``scripts/e2e-vllm.sh`` puts this
directory on their ``PYTHONPATH``); nothing of the sidecar imports it.

vLLM's CPU build runs its engine loop in one process whose main thread busy-waits for the
worker (``os.sched_yield`` in a loop, taking the GIL back each time). The thread of that
process that sends outputs to the API server then waits for Python's switch interval,
5 ms by default, for its GIL hand-offs, and falls behind a tiny model that steps hundreds
of times a second. Measured with a plain streaming client (no sidecar) against the loop
model, 1,500-3,000 tokens a stream: at the default interval 16 of 22 streams had a gap
(or a first byte) of over a second, up to 4 s, some arriving whole at the end; at 0.5 ms,
1 of 16 did (1 s), and the others' worst gap was 13 ms. The e2e suite still sees an
occasional stall of several seconds, which its bounds allow for (``tests/e2e/conftest.py``).
This is the CPU build on 2 cores, not the sidecar.
"""

import sys

sys.setswitchinterval(0.0005)
