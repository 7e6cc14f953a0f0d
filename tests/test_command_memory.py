"""Server memory per command output is bounded by what is kept: a real `rootbound` stdio process runs one, then
eight concurrent commands that each print 10 MiB (all of it kept: max_output_size is 10 MiB), and its peak RSS
growth (VmHWM) and what it keeps afterwards are measured from /proc.

The floor for one output is about 8x what is kept, and not the server's own doing: the result holds stdout
twice (structuredContent and the text block, as the seeds ask: 20 MiB), and the SDK writes the JSON message as
a string and then as bytes (40 MiB more). Eight at once overlap: 2.4-3x what is kept, depending on how many
results wait for the one stdio writer together. The capture, spill and decoding around them add at most one
more copy, and nothing stays behind. Before this was fixed: 9.5x for one, 2.9-3.6x for eight, and 20-35 MiB
left behind for good."""

from __future__ import annotations

import pytest
from bench.command_memory import MiB, measure


@pytest.mark.timeout(300)
def test_one_big_output_costs_the_result_and_its_message_and_leaves_nothing() -> None:
    r = measure(1, size=10 * MiB, max_output=10 * MiB)
    assert r["peak_growth"] < 8.75 * r["kept"], f"peak growth {r['peak_growth'] / MiB:.1f} MiB for 10 MiB kept"
    assert r["left"] < 0.5 * r["kept"], f"{r['left'] / MiB:.1f} MiB left behind"


@pytest.mark.timeout(300)
def test_eight_concurrent_big_outputs_cost_a_few_times_what_is_kept_and_leave_nothing() -> None:
    r = measure(8, size=10 * MiB, max_output=10 * MiB)
    assert r["peak_growth"] < 3.5 * r["kept"], f"peak growth {r['peak_growth'] / MiB:.1f} MiB for 80 MiB kept"
    assert r["left"] < 0.1 * r["kept"], f"{r['left'] / MiB:.1f} MiB left behind"
