"""Failure families the log analyser reads, one test each, in the forms real jobs print them
(docs/log-attribution-policy.md). Each family was written for the corpus's `tune` cases of at
least two sources; these tests pin the family itself, in each of its forms."""

from __future__ import annotations

import pytest

from nvrx.analyze.logattr import attribute_log
from nvrx.score.evidence import RESTART, STOP


def attribute(*lines: str) -> tuple[str, str | None, int | None]:
    result = attribute_log("\n".join(lines) + "\n")
    return result.decision, result.fault_class, result.root_rank


@pytest.mark.parametrize(
    "line",
    [
        "[node-0:2121 :0:7025] Caught signal 7 (Bus error: nonexistent physical address)",
        "Fatal Python error: Bus error",
        "  traceback : Signal 7 (SIGBUS) received by PID 214033",
        "  exitcode  : -7 (pid: 214033)",
        "srun: error: n3: task 2: Bus error",
    ],
)
def test_a_bus_error_is_a_software_crash_that_stops(line: str) -> None:
    decision, fault, _ = attribute("epoch 3 step 900 loss 1.08", line)
    assert (decision, fault) == (STOP, "BUS_ERROR")


def test_a_bus_error_names_the_rank_srun_gives_it() -> None:
    assert attribute("0: step 1", "srun: error: n3: task 2: Bus error")[2] == 2


@pytest.mark.parametrize(
    "line",
    [
        "w0:116:236 [3] misc/socket.cc:480 NCCL WARN socketStartConnect: Connect to "
        "192.168.102.1<38007> failed : Software caused connection abort",
        "asr-13:941227:943077 [0] include/socket.h:390 NCCL WARN Connect to 10.38.10.112<21724> "
        "failed : Connection refused",
        "gpu7:55:80 [1] NCCL WARN socketProgress: Connection closed by remote peer gpu3<51234>",
        "gpu7:55:80 [1] NCCL WARN bootstrap.cc:150 bootstrapRoot: failed to accept connection",
    ],
)
def test_nccl_giving_up_on_a_peer_socket_is_a_network_error_that_restarts(line: str) -> None:
    decision, fault, _ = attribute("NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", line)
    assert (decision, fault) == (RESTART, "NCCL_ERROR")


def test_nccl_warnings_that_are_not_about_a_connection_are_not_network_errors() -> None:
    line = "gpu7:55:80 [1] NCCL WARN NCCL_SOCKET_IFNAME set by environment to eth0"
    assert attribute("step 1", line)[1] != "NCCL_ERROR"


def test_a_launchers_workers_carry_their_own_rank_inside_the_srun_label() -> None:
    # srun's task 0 runs a launcher with two workers; worker 1 fails, worker 0 is stopped.
    log = [
        "0: [launcher n1] cycle 0: started 2 workers (ranks 0, 1)",
        "0: 0: iteration 5",
        "0: 1: Traceback (most recent call last):",
        '0: 1:   File "train.py", line 9, in <module>',
        "0: 1:     step()",
        "0: 1: ValueError: bad batch",
        "0: 0: received SIGTERM, exiting",
    ]
    assert attribute(*log) == (STOP, "WORKLOAD_EXC", 1)


def test_srun_exits_name_launchers_once_workers_label_their_lines() -> None:
    # Task 0 is a launcher: its exit is no rank's; the rank that failed is worker 3's.
    log = [
        "0: [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "0: [rank1]: iteration 7",
        "srun: error: n1: task 0: Exited with exit code 1",
    ]
    assert attribute(*log) == (STOP, "CUDA_OOM", 3)


def test_a_rank_that_torch_labels_inside_its_own_srun_label_is_still_that_task() -> None:
    log = ["2: [rank2]: step 4", "srun: error: n2: task 2: Segmentation fault"]
    assert attribute(*log) == (STOP, "SEGFAULT", 2)
