"""Failure families the log analyser reads, one test each, in the forms real jobs print them
(docs/log-attribution-policy.md). Each family was written for the corpus's `tune` cases of at
least two sources; these tests pin the family itself, in each of its forms."""

from __future__ import annotations

import pytest

from nvrx.analyze.logattr import ERRORS_NOT_FOUND, attribute_log
from nvrx.logtext import RESTART, STOP


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


@pytest.mark.parametrize(
    "line",
    [
        "E0312 00:49:05.096000 184948 torch/distributed/elastic/multiprocessing/api.py:869] failed "
        "(exitcode: 1) local_rank: 0 (pid: 185002) of binary: /venv/bin/python",
        "  exitcode  : 2 (pid: 78970)",
        "[2023-04-21 03:07:25,713] [ERROR] [launch.py:434:sigkill_handler] ['python', '-u', "
        "'main.py', '--local_rank=1'] exits with return code = 1",
    ],
)
def test_a_workers_positive_exit_code_is_an_exception_whose_traceback_is_elsewhere(
    line: str,
) -> None:
    assert attribute("step 10 loss 2.0", line)[:2] == (STOP, "WORKLOAD_EXC")


def test_an_earlier_strong_failure_explains_the_exit_code_after_it() -> None:
    log = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB.",
        "  exitcode  : 1 (pid: 4242)",
        "srun: error: gpu-001: tasks 0-2,4: Exited with exit code 1",
    ]
    assert attribute(*log)[:2] == (STOP, "CUDA_OOM")


REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-05-19_16:39:58
  host      : node-a
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 78971)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 78971
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-19_16:39:58
  host      : node-a
  rank      : 4 (local_rank: 0)
  exitcode  : 1 (pid: 78970)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""


def test_the_reports_root_cause_is_the_root_and_its_other_failures_are_consequences() -> None:
    result = attribute_log(REPORT + "\n")
    assert (result.decision, result.fault_class, result.root_rank) == (STOP, "WORKLOAD_EXC", 4)
    assert any(5 in issue.ranks for issue in result.secondary)


def test_a_report_cut_inside_its_root_cause_keeps_the_failures_it_listed() -> None:
    cut = REPORT[: REPORT.index("  rank      : 4")]
    assert attribute(cut)[:2] == (STOP, "SIGKILL")


def two_reports(first: tuple[str, int], second: tuple[str, int]) -> str:
    """Two nodes' agents each print their report, the later-failing node's first."""

    def report(time: str, rank: int) -> str:
        return (
            REPORT.replace("2024-05-19_16:39:58", time)
            .replace("rank      : 4 (local_rank: 0)", f"rank      : {rank} (local_rank: 0)")
            .replace("rank      : 5 (local_rank: 1)", f"rank      : {rank + 1} (local_rank: 1)")
        )

    return report(*first) + "\n" + report(*second) + "\n"


def test_of_two_reports_the_root_cause_that_failed_first_in_time_is_the_root() -> None:
    log = two_reports(("2024-05-19_16:40:31", 0), ("2024-05-19_16:39:58", 4))
    assert attribute_log(log).root_rank == 4
    in_order = two_reports(("2024-05-19_16:39:58", 0), ("2024-05-19_16:40:31", 4))
    assert attribute_log(in_order).root_rank == 0


@pytest.mark.parametrize(
    ("later", "earlier"),
    [
        # two nodes' logs concatenated: node b's lines come after node a's, but failed first
        ("[2024-03-02 10:15:07,311] [rank3]: RuntimeError: CUDA error: an illegal memory access "
         "was encountered",
         "[2024-03-02 10:14:59,020] [rank9]: RuntimeError: CUDA error: an illegal memory access "
         "was encountered"),
        ("[rank3]:[E302 10:15:07.311000 ProcessGroupNCCL.cpp:616] [Rank 3] NCCL WARN NET/IB : "
         "Got completion with error 12",
         "[rank9]:[E302 10:14:59.020000 ProcessGroupNCCL.cpp:616] [Rank 9] NCCL WARN NET/IB : "
         "Got completion with error 12"),
    ],
)  # fmt: skip
def test_the_first_failure_in_time_is_the_root_where_the_lines_say_when(
    later: str, earlier: str
) -> None:
    assert attribute("step 10 loss 2.3", later, earlier)[2] == 9


def test_times_in_different_forms_do_not_compare_and_log_order_decides() -> None:
    log = [
        "[2024-03-02 10:15:07,311] [rank3]: RuntimeError: CUDA error: an illegal memory access "
        "was encountered",
        "[rank9]:[E302 10:14:59.020000 ProcessGroupNCCL.cpp:616] CUDA error: an illegal memory "
        "access was encountered",
    ]
    assert attribute(*log)[2] == 3


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: Task launch for 36.0 failed on node cn131: Job credential expired",
        "srun: error: task 0 launch failed: Slurmd could not connect IO",
        "slurmstepd: error: execve(): /tmp/slurmd/job2997814/slurm_script: No such file or directory",
        "pdsh@host-7: localhost: ssh exited with exit code 255",
        "localhost: user@localhost: Permission denied (publickey,password).",
        "RuntimeError: Using hostfile at /etc/hostfile but host=w-0 was not reachable via ssh.",
    ],
)
def test_a_node_that_cannot_start_the_tasks_is_a_launch_failure_that_restarts(line: str) -> None:
    assert attribute(line)[:2] == (RESTART, "LAUNCH_FAILED")


@pytest.mark.parametrize(
    "line",
    [
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
        "shared memory (shm).",
        "RuntimeError: DataLoader worker (pid 325) is killed by signal: Bus error.",
        "NCCL WARN Error: failed to extend /dev/shm/nccl-abc to 9637892 bytes: No space left on "
        "device",
    ],
)
def test_shared_memory_running_out_is_a_resource_limit_not_a_code_bug(line: str) -> None:
    assert attribute("epoch 2", line)[:2] == (STOP, "SHM_FULL")


@pytest.mark.parametrize(
    "line",
    [
        " iteration 5426/ 250000 | loss scale: 1.0 | grad norm: nan | number of nan iterations: 0 |",
        "{'loss': 0.0, 'rewards/chosen': nan, 'rewards/rejected': nan, 'epoch': 0.0}",
        "  0% 411/788222 [28:13<880:51:13, 4.03s/it, loss=nan, lr=2.5e-5]",
    ],
)
def test_a_metric_logged_as_nan_that_stays_nan_is_a_nan_failure(line: str) -> None:
    assert attribute(line, line)[:2] == (STOP, "NAN_LOSS")


def test_a_nan_metric_that_comes_back_finite_was_a_skipped_step_not_a_failure() -> None:
    log = [
        "Epoch [1][100/62598] lr: 1.000e-03, loss: 1.9091, grad_norm: nan",
        "Epoch [1][200/62598] lr: 1.000e-03, loss: 0.9213, grad_norm: 3.9812",
    ]
    assert attribute(*log)[0] == ERRORS_NOT_FOUND


def test_megatrons_nan_iteration_counter_is_not_a_nan() -> None:
    line = " iteration 7/ 100 | lm loss: 2.3E+00 | grad norm: 1.2 | number of nan iterations: 0 |"
    assert attribute(line)[0] == ERRORS_NOT_FOUND


@pytest.mark.parametrize(
    "line",
    [
        "[rank4]:[E205 18:11:06.375 ProcessGroupNCCL.cpp:1870] [PG ID 12 Rank 4] ProcessGroupNCCL's "
        "watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
        "collectives.",
        "[rank0]:[E804 23:05:54.817 ProcessGroupNCCL.cpp:1914] [PG ID 0 Rank 0] Received a dump "
        "signal due to a collective timeout from  rank 13 and we will try our best to dump the "
        "debug info.",
    ],
)
def test_the_watchdogs_heartbeat_and_dump_signals_are_hangs(line: str) -> None:
    assert attribute(line)[:2] == (RESTART, "HANG")


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        (
            "mpirun noticed that process rank 1 with PID 4242 on node n3 exited on signal 9 (Killed).",
            1,
        ),
        ("run.sh: line 66: 777016 Killed                  python train.py", None),
    ],
)
def test_a_kill_reported_by_mpirun_or_the_shell_is_a_sigkill(line: str, rank: int | None) -> None:
    assert attribute("step 85700", line) == (STOP, "SIGKILL", rank)


def test_a_time_at_the_start_of_a_line_is_not_an_srun_label() -> None:
    line = "18:19:06.687 [rank2]: Fatal Python error: Segmentation fault"
    assert attribute(line) == (STOP, "SEGFAULT", 2)


def test_the_explanation_cites_the_cause_and_the_consequences_it_set_aside() -> None:
    fanout = [
        "W0726 10:59:50.786 api.py:858] Sending process 147865 closing signal SIGTERM",
        "W0726 10:59:50.787 api.py:858] Sending process 147866 closing signal SIGTERM",
    ]
    result = attribute_log("\n".join([*fanout, *REPORT.splitlines()]) + "\n")
    root_line = 2 + REPORT.splitlines().index("  exitcode  : 1 (pid: 78970)") + 1
    assert result.explanation.startswith(f"WORKLOAD_EXC on rank 4 at line {root_line}:")
    assert "the launcher's SIGTERM to 2 workers (lines 1, 2)" in result.explanation
    assert "the failures of rank 5 that the report lists before its root cause (lines 12, 14)" in (
        result.explanation
    )


def test_peers_that_timed_out_are_cited_as_consequences_with_their_lines() -> None:
    log = [
        "1: Fatal Python error: Segmentation fault",
        "0: [rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5) ran for 600010 ms",
        "2: [rank2]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5) ran for 600010 ms",
        "srun: error: n1: task 1: Segmentation fault",
    ]
    result = attribute_log("\n".join(log) + "\n")
    assert result.explanation.startswith("SEGFAULT on rank 1 at line 1:")
    assert "ranks 0, 2 timed out waiting for rank 1 (lines 2, 3)" in result.explanation


@pytest.mark.parametrize(
    "line",
    [
        "*** Error in `python': malloc(): smallbin double linked list corrupted: 0x00007f9dfc2cc060 ***",
        "munmap_chunk(): invalid pointer",
        "double free or corruption (!prev)",
    ],
)
def test_glibcs_heap_checks_abort_the_process(line: str) -> None:
    assert attribute("step 3", line)[:2] == (STOP, "OS_ABORT")


def test_mpi_and_horovod_tags_name_the_rank() -> None:
    assert attribute("[1,2]<stderr>:munmap_chunk(): invalid pointer") == (STOP, "OS_ABORT", 2)
    line = "Mon Jun  7 11:51:57 2021[3]<stderr>:double free or corruption (out)"
    assert attribute(line) == (STOP, "OS_ABORT", 3)


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 4330, "
        "for key: store_based_barrier_key:522 (world_size=2048, worker_count=1792, timeout=0:30:00)",
        "[2021-06-07 11:51:57.963853: E /tmp/horovod/common/gloo/http_store.cc:96] HTTP GET "
        "request failed too many times, aborting. See exception message for details.",
    ],
)
def test_a_rendezvous_store_out_of_reach_is_a_lost_store(line: str) -> None:
    assert attribute(line)[:2] == (RESTART, "STORE_LOST")


def test_a_gloo_send_or_recv_timeout_raised_as_an_error_is_a_hang() -> None:
    line = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
        "waiting 1800000ms for recv operation to complete"
    )
    assert attribute(line)[:2] == (RESTART, "HANG")


STALL = (
    "[1,0]<stderr>:W horovod/common/stall_inspector.cc:105] One or more tensors were submitted to "
    "be reduced by subset of ranks and are waiting for remainder of ranks for more than 60 seconds."
)


def test_a_stall_that_nothing_follows_is_a_hang_on_the_rank_it_names_missing() -> None:
    log = [STALL, "HorovodAllreduce_gradients_AddN_100_0 [missing ranks: 2]"]
    assert attribute(*log) == (RESTART, "HANG", 2)


def test_a_stall_warning_that_training_gets_past_is_not_a_failure() -> None:
    log = [STALL, "[1,1]<stderr>:INFO:tensorflow:loss = 25.564167, step = 0"]
    assert attribute(*log)[0] == ERRORS_NOT_FOUND


def test_nccls_socket_creation_failing_is_a_network_error() -> None:
    line = (
        "[1,4]<stdout>:gpu7:4105:4372 [0] include/socket.h:318 NCCL WARN Net : Socket creation "
        "failed : Address family not supported by protocol"
    )
    assert attribute(line) == (RESTART, "NCCL_ERROR", 4)


def test_a_traceback_whose_exception_names_an_oom_is_an_oom_not_a_code_bug() -> None:
    log = [
        "0: iteration 1",
        "1: Traceback (most recent call last):",
        '1:   File "train.py", line 10, in <module>',
        "1:     step()",
        "1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "srun: error: n2: task 1: Exited with exit code 1",
    ]
    assert attribute(*log) == (STOP, "CUDA_OOM", 1)


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        (
            "Memory access fault by GPU node-4 (Agent handle: 0x55d6) on address 0x7f3a. Reason: "
            "Page not present or supervisor privilege.",
            "GPU_ERROR",
        ),
        ("Fatal Python error: none_dealloc: deallocating None", "OS_ABORT"),
        ("Fatal Python error: GC object already tracked", "OS_ABORT"),
        ("terminate called after throwing an instance of 'std::bad_alloc'", "HOST_OOM"),
        ("  what():  std::bad_alloc", "HOST_OOM"),
    ],
)
def test_rocm_faults_cpython_fatal_errors_and_failed_allocations(line: str, fault: str) -> None:
    assert attribute("step 901", line)[1] == fault


def test_cpythons_fatal_segfault_is_still_a_segfault() -> None:
    assert attribute("Fatal Python error: Segmentation fault")[1] == "SEGFAULT"


@pytest.mark.parametrize("signal", [1, 2, 15])
def test_the_agent_receiving_a_death_signal_is_a_signal_from_outside(signal: int) -> None:
    line = (
        "WARNING:torch.distributed.elastic.agent.server.api:Received "
        f"{signal} death signal, shutting down workers"
    )
    assert attribute("step 2905", line)[:2] == (RESTART, "SIGTERM")


def test_a_workers_exit_code_minus_6_is_an_abort() -> None:
    line = "E0911 api.py:869] failed (exitcode: -6) local_rank: 0 (pid: 470) of binary: python"
    assert attribute("74/74 saved checkpoint", line)[:2] == (STOP, "OS_ABORT")


def test_the_watchdogs_own_abort_after_a_collective_timeout_is_a_consequence_of_the_hang() -> None:
    log = [
        "[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=5, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800083 ms",
        "E0911 api.py:869] failed (exitcode: -6) local_rank: 1 (pid: 471) of binary: python",
    ]
    assert attribute(*log)[:2] == (RESTART, "HANG")


@pytest.mark.parametrize(
    "line",
    [
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run.",
        "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.",
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1",
    ],
)
def test_a_loss_scale_at_its_floor_is_a_nan_loss_that_stops(line: str) -> None:
    decision, fault, _ = attribute("step 93 loss 2.11", line)
    assert (decision, fault) == (STOP, "NAN_LOSS")


def test_an_overflow_that_only_lowers_the_loss_scale_is_not_a_failure() -> None:
    line = (
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
    )
    assert attribute("step 1 loss 9.7", line, "step 2 loss 9.1")[0] == ERRORS_NOT_FOUND


@pytest.mark.parametrize(
    ("type_", "what", "fault"),
    [
        ("c10::CUDAError", "CUDA error: device-side assert triggered", "DEVICE_ASSERT"),
        ("c10::Error", "CUDA error: an illegal memory access was encountered", "GPU_ERROR"),
        ("std::bad_alloc", "std::bad_alloc", "HOST_OOM"),
        (
            "boost::filesystem::filesystem_error",
            "boost::filesystem::create_directory: File exists",
            "OS_ABORT",
        ),
    ],
)
def test_a_cpp_terminate_is_the_failure_its_what_line_names(
    type_: str, what: str, fault: str
) -> None:
    log = ["step 5", f"terminate called after throwing an instance of '{type_}'"]
    assert attribute(*log, f"  what():  {what}")[1] == fault


def test_a_cpp_terminate_whose_what_line_is_not_in_the_log_is_an_abort() -> None:
    line = "terminate called after throwing an instance of 'boost::filesystem::filesystem_error'"
    assert attribute("step 5", line)[:2] == (STOP, "OS_ABORT")


def test_a_cpp_terminate_in_a_collapsed_one_line_log_reads_its_what_on_the_same_line() -> None:
    line = (
        "[E ProcessGroupNCCL.cpp:460] taking the entire process down. terminate called after "
        "throwing an instance of 'std::runtime_error' what(): NCCL error: remote process exited "
        "or there was a network error, ncclRemoteError: A call failed"
    )
    assert attribute(line)[:2] == (RESTART, "NCCL_ERROR")


def test_a_cpp_terminate_after_a_failure_on_its_rank_is_its_consequence() -> None:
    log = [
        "[1]<stderr>:[E http_store.cc:96] HTTP GET request failed too many times, aborting.",
        "[1]<stderr>:terminate called after throwing an instance of 'std::runtime_error'",
        "[1]<stderr>:  what():  HTTP request failed.",
    ]
    assert attribute(*log) == (RESTART, "STORE_LOST", 1)


def test_a_terminate_over_a_peers_failure_is_no_failure_of_its_own() -> None:
    line = "terminate called after throwing an instance of 'c10::DistBackendError'"
    assert attribute("step 5", line)[0] == ERRORS_NOT_FOUND


@pytest.mark.parametrize(
    "line",
    [
        "TimeoutError: The client socket has timed out after 1800s while trying to connect to "
        "(127.0.0.1, 57388).",
        "[E socket.cpp:753] [c10d] The client socket has failed to connect to any network "
        "address of (node7, 47389).",
    ],
)
def test_the_c10d_client_giving_up_on_the_store_is_a_lost_store(line: str) -> None:
    assert attribute("initializing process group", line)[:2] == (RESTART, "STORE_LOST")


def test_one_failed_attempt_to_reach_the_store_is_not_a_failure() -> None:
    line = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to node7:47389 "
        "(errno: 110 - Connection timed out)."
    )
    assert attribute(line, "step 1 loss 3.2", "step 2 loss 3.1")[0] == ERRORS_NOT_FOUND


def test_pythons_own_exception_class_raised_is_an_exception_in_the_code() -> None:
    log = ["Traceback (most recent call last):", "    raise Exception(msg)", "Exception: ", ""]
    assert attribute("epoch 002: 15300 / 41687 loss=3.211", *log)[:2] == (STOP, "WORKLOAD_EXC")


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by "
        "peer [10.0.0.2]:4343",
        "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
        "[172.31.71.170]:13195: Connection refused",
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
        "pair.h:301] Connect timeout [none]",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error "
        "[192.168.70.92]:25266: Connection reset by peer",
    ],
)
def test_gloos_transport_losing_a_peer_is_a_network_error_that_restarts(line: str) -> None:
    assert attribute("epoch 1 step 20", line)[:2] == (RESTART, "NCCL_ERROR")


def test_gloos_recv_timeout_stays_a_hang() -> None:
    line = (
        "RuntimeError: [../third_party/gloo/gloo/transport/unbound_buffer.cc:81] Timed out "
        "waiting 1800000ms for recv operation to complete"
    )
    assert attribute("step 3", line)[:2] == (RESTART, "HANG")


def test_a_traceback_the_log_ends_inside_is_an_exception_on_its_rank() -> None:
    log = [
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "pretrain_gpt.py", line 290, in <module>',
        "[rank3]:     pretrain(",
    ]
    assert attribute("[rank3]: step 1 loss 9.1", *log) == (STOP, "WORKLOAD_EXC", 3)


def test_a_cut_traceback_after_another_failure_is_its_consequence() -> None:
    log = [
        "[E socket.cpp:793] [c10d] The client socket has timed out after 60s while trying to "
        "connect to (node1, 2222).",
        "Traceback (most recent call last):",
    ]
    assert attribute(*log)[:2] == (RESTART, "STORE_LOST")


def test_a_traceback_quoted_inside_a_message_opens_nothing() -> None:
    line = '      "py_callstack": "Traceback (most recent call last):\\n  File \\"x.py\\""'
    assert attribute("step 1", line)[0] == ERRORS_NOT_FOUND


def test_open_mpis_summary_names_the_first_rank_to_exit() -> None:
    log = [
        "[1,1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception "
        "on one of the ranks or an attempt to allreduce after one of the ranks finished.",
        "Primary job  terminated normally, but 1 process returned",
        "a non-zero exit code. Per user-direction, the job has been aborted.",
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "the job to be terminated. The first process to do so was:",
        "",
        "  Process name: [[29973,1],0]",
        "  Exit code:    1",
    ]
    assert attribute(*log) == (STOP, "WORKLOAD_EXC", 0)


def test_horovods_shutdown_alone_is_an_exception_on_a_rank_it_does_not_name() -> None:
    line = (
        "AbortedError (see above for traceback): Horovod has been shut down. This was caused by "
        "an exception on one of the ranks or an attempt to allreduce a tensor after one of the "
        "ranks finished execution."
    )
    assert attribute("step 10", line) == (STOP, "WORKLOAD_EXC", None)


def test_horovods_shutdown_after_a_failure_is_its_consequence() -> None:
    log = [
        "[0]<stderr>:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception on "
        "one of the ranks",
    ]
    assert attribute(*log) == (STOP, "CUDA_OOM", 0)


@pytest.mark.parametrize("quote", ["", "> "])
def test_ipythons_traceback_header_opens_a_traceback_the_log_may_end_inside(quote: str) -> None:
    log = [
        "Epoch 0:  12%|#2        | 30/250",
        "-" * 75,
        f"{quote}ProcessExitedException                    Traceback (most recent call last)",
        "<ipython-input-1-e1523c2c83af> in <module>",
        "---> 36     main()",
        "~/.local/lib/python3.8/site-packages/torch/multiprocessing/spawn.py in join(self)",
        "--> 188     while not context.join():",
    ]
    assert attribute(*log) == (STOP, "WORKLOAD_EXC", None)


def test_ipythons_header_cut_by_the_excerpt_still_opens_a_traceback() -> None:
    log = [
        "[04/02 06:29:18 d2.engine.hooks]: Total training time: 0:00:09 (0:00:00 on hooks)",
        "-" * 75,
        "ProcessRaisedException                    Traceback (most re",
    ]
    assert attribute(*log) == (STOP, "WORKLOAD_EXC", None)


def test_ipythons_header_names_what_failed_when_its_class_does() -> None:
    log = [
        "OutOfMemoryError                          Traceback (most recent call last)",
        "Cell In[23], line 1",
        "----> 1 mod.train(max_epochs=30000)",
    ]
    assert attribute(*log)[:2] == (STOP, "CUDA_OOM")


@pytest.mark.parametrize(
    "line",
    [
        "the usual Python output starts with Traceback (most recent call last) and frames",
        "see Traceback (most recent call last)",
        "Printed Traceback (most of it) below",
    ],
)
def test_the_words_traceback_most_recent_call_last_inside_a_sentence_open_nothing(
    line: str,
) -> None:
    assert attribute("step 1", line)[0] == ERRORS_NOT_FOUND


@pytest.mark.parametrize(
    "line",
    [
        "F0912 11:59:01.941641  741969 shape_tree.cc:54] Check failed: "
        "result->children_start_id >= 0 (-1 vs. 0)",
        "2025-04-23 20:35:34.618070: F external/xla/xla/service/gpu/autotuning/"
        "gemm_fusion_autotuner.cc:1099] Non-OK-status: executable.status()",
        "*** Check failure stack trace: ***",
    ],
)
def test_a_fatal_glog_or_absl_check_is_a_native_abort(line: str) -> None:
    assert attribute("step 10 loss 3.2", line)[:2] == (STOP, "OS_ABORT")


@pytest.mark.parametrize(
    "line",
    [
        # glog's other levels, and a CHECK in words that no fatal log printed, abort nothing.
        "W0912 11:59:01.941641  741969 shape_tree.cc:54] Check failed: x (1 vs. 0)",
        "I0912 11:59:01.941641  741969 gpu_compiler.cc:12] Non-OK-status: retrying",
        "sanity check failed: the dataset has 3 duplicate ids",
    ],
)
def test_other_log_levels_and_checks_in_words_are_not_an_abort(line: str) -> None:
    assert attribute("step 10 loss 3.2", line)[1] != "OS_ABORT"


@pytest.mark.parametrize(
    "line",
    [
        "(WorkerDict pid=804460) LLVM ERROR: Failed to compute parent layout",
        "LLVM ERROR: Can't find libdevice at neither /opt/triton/libdevice.10.bc nor /tmp/x.bc",
    ],
)
def test_llvms_fatal_error_is_a_native_abort(line: str) -> None:
    assert attribute("step 3 loss 2.2", line)[:2] == (STOP, "OS_ABORT")


def test_a_job_that_could_not_reach_its_nodes_is_a_launch_failure() -> None:
    line = "ssh: connect to host 192.168.11.1 port 50000: Connection refused"
    assert attribute(line)[:2] == (RESTART, "LAUNCH_FAILED")


@pytest.mark.parametrize(
    "lines",
    [
        # a client's request that failed for want of the controller
        [
            "srun: error: Unable to allocate resources: Unable to contact slurm controller "
            "(connect failure)"
        ],
        [
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
            "(connect failure)"
        ],
        [
            "srun: error: Unable to confirm allocation for job 60564: Unable to contact slurm "
            "controller (connect failure)"
        ],
        ["srun: error: Unable to allocate resources: Socket timed out on send/recv operation"],
        [
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
            "Submitted batch job 3310344",
        ],
        ["sbatch: fatal: Could not establish a configuration source"],
        # a query that failed the same way
        [
            "squeue: error: slurm_receive_msg: Socket timed out on send/recv operation, ",
            "slurm_load_jobs error: Socket timed out on send/recv operation",
        ],
        ["slurm_load_partitions: Unable to contact slurm controller (connect failure)"],
        ["slurm_load_partitions: Zero Bytes were transmitted or received"],
        # munge: the request could not be authenticated
        [
            'sbatch: error: Munge encode failed: Failed to access "/run/munge/munge.socket.2": No '
            "such file or directory",
            "sbatch: error: Batch job submission failed: Protocol authentication error",
        ],
        ["[2015-10-09T08:50:15.259] error: Munge decode failed: Invalid credential"],
        [
            "[2023-05-11T06:46:55.688] error: slurm_unpack_received_msg: "
            "MESSAGE_NODE_REGISTRATION_STATUS has authentication error: Invalid authentication "
            "credential"
        ],
        # a daemon that cannot find its controller
        ["slurmstepd: error: Unable to establish control machine address"],
    ],
)
def test_slurm_out_of_reach_restarts_once_it_answers(lines: list[str]) -> None:
    # Not the request's mistake (a refused request stops, below): the same request succeeds
    # once the controller and munge answer again.
    assert attribute(*lines)[:2] == (RESTART, "SLURM_UNREACHABLE")


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: Unable to allocate resources: Requested node configuration is not available",
        "srun: error: Unable to allocate resources: Requested time limit is invalid (missing or "
        "exceeds some limit)",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition "
        "combination specified",
    ],
)
def test_a_request_slurm_refuses_stops_since_it_is_refused_again(line: str) -> None:
    assert attribute(line)[:2] == (STOP, "JOB_REJECTED")


def test_a_controller_blip_in_a_running_job_is_no_failure() -> None:
    # srun's own retry while the job runs: no allocation or submission failed.
    log = [
        "0: iteration 100 loss 3.1",
        "srun: error: Unable to contact slurm controller (connect failure)",
        "0: iteration 200 loss 3.0",
    ]
    assert attribute(*log)[0] == ERRORS_NOT_FOUND


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: Job 34477 exceeded memory limit (169384386560 > 161061273600), "
        "being killed",
        "slurmstepd: Job 1171978 exceeded memory limit (18202456 > 16384000), being killed",
        "slurmstepd: error: Exceeded job memory limit",
    ],
)
def test_slurms_memory_limit_killing_the_job_is_a_host_oom_before_its_cancel(line: str) -> None:
    cancel = "slurmstepd: *** JOB 1171978 ON cuda-24-0 CANCELLED AT 2018-10-16T13:24:27 ***"
    assert attribute("epoch 1 step 40", line, cancel)[:2] == (STOP, "HOST_OOM")


def test_slurms_end_of_step_memory_note_kills_nothing() -> None:
    log = [
        "0: done, saving the model",
        "slurmstepd: error: Exceeded step memory limit at some point.",
    ]
    assert attribute(*log)[0] == ERRORS_NOT_FOUND


@pytest.mark.parametrize(
    "frames",
    [
        [
            "frame #0: std::function<std::string ()>::operator()() const + 0x11 (0x7fa72bfe2441 "
            "in /envs/mm/lib/python3.6/site-packages/torch/lib/libc10.so)",
            "frame #3: c10::TensorImpl::release_resources() + 0x50 (0x7fa72bfd2ce0 in "
            "/envs/mm/lib/python3.6/site-packages/torch/lib/libc10.so)",
        ],
        [
            " 6 0x0000000000034ef3 ompi_comm_create()  /build/ompi/communicator/comm.c:344",
            " 7 0x000000000006b24a PMPI_Comm_create()  /build/ompi/mpi/c/profile/pcomm_create.c:66",
        ],
    ],
)
def test_a_native_backtrace_without_its_signal_line_is_a_crash(frames: list[str]) -> None:
    assert attribute("iteration 10 loss 4.2", *frames) == (STOP, "CRASH", None)


def test_a_native_backtrace_after_an_error_is_that_errors() -> None:
    log = [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f3 in libc10.so)",
    ]
    assert attribute(*log)[:2] == (STOP, "GPU_ERROR")


@pytest.mark.parametrize(
    "store",
    [
        "torch.distributed.DistNetworkError: The client socket has timed out after 1800s while "
        "trying to connect to (127.0.0.1, 26514).",
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, "
        "for key: store_based_barrier_key:1 (world_size=4, worker_count=16, timeout=0:30:00)",
    ],
)
def test_a_store_never_reached_explains_the_workers_exit_code(store: str) -> None:
    report = (
        "E1026 17:31:34.002000 139984755545088 torch/distributed/elastic/multiprocessing/api.py:"
        "833] failed (exitcode: 1) local_rank: 0 (pid: 167240) of binary: /usr/bin/python"
    )
    assert attribute(store, report)[:2] == (RESTART, "STORE_LOST")


def test_a_reset_store_before_the_exit_code_is_the_dead_ranks_consequence() -> None:
    # A peer died (its traceback is not in the log): the store connection reset is what the
    # others saw of it; the exit code reports the death itself.
    log = [
        "[rank0]: RuntimeError: Connection reset by peer",
        "failed (exitcode: 1) local_rank: 3 (pid: 4242) of binary: /usr/bin/python",
    ]
    assert attribute(*log)[:2] == (STOP, "WORKLOAD_EXC")


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("tomte401:1850301:1881341 [0] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'",
         "GPU_ERROR"),
        ("DESKTOP-1CE5APL:2852:3596 [0] include/alloc.h:112 NCCL WARN Cuda failure 999 'unknown "
         "error'", "GPU_ERROR"),
        ("ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
         "CUDA_OOM"),
    ],
)  # fmt: skip
def test_nccls_report_of_a_failed_cuda_call_is_the_cuda_error_it_names(
    line: str, fault: str
) -> None:
    assert attribute("step 7 loss 1.9", line)[:2] == (STOP, fault)


def test_a_nan_in_a_part_of_the_loss_that_stays_is_a_nan_loss() -> None:
    log = [
        "02:29:53: train iter: 0 loss_net: 0.9443 loss_scale: 32768.0000 norm: 21.8862",
        "02:31:56: train iter: 100 loss_net: nan loss_scale: 785.4200 norm: nan",
        "02:33:59: train iter: 200 loss_net: nan loss_scale: 1.0000 norm: nan",
    ]
    assert attribute(*log)[:2] == (STOP, "NAN_LOSS")


def test_a_nan_part_of_the_loss_that_comes_back_is_a_skipped_step() -> None:
    log = [
        "iter 100 loss_cls: nan loss_bbox: 0.21",
        *[f"iter {i} loss_cls: 0.53 loss_bbox: 0.20" for i in range(101, 104)],
    ]
    assert attribute(*log)[0] == ERRORS_NOT_FOUND


def test_a_cut_traceback_whose_header_lost_its_prefix_takes_its_frames_rank() -> None:
    log = [
        "Traceback (most recent call last):",
        '[rank2]:   File "/work/train_sft.py", line 180, in <module>',
        "[rank2]:     train(args)",
        '[rank2]:   File "/envs/deepspeed/runtime/config.py", line 961, in _configure',
        "[rank2]:     self._batch_assertion()",
    ]
    assert attribute(*log) == (STOP, "WORKLOAD_EXC", 2)
    # A header that says its rank keeps it.
    assert attribute("[rank5]: Traceback (most recent call last):", *log[1:])[2] == 5


def test_open_mpi_failing_to_start_its_daemons_is_a_launch_failure() -> None:
    log = [
        "ssh: Could not resolve hostname lm-horovod-job-worker-5.lm-horovod-job: Name or "
        "service not known",
        "-" * 74,
        "ORTE was unable to reliably start one or more daemons.",
        "This usually is caused by:",
    ]
    assert attribute(*log)[:2] == (RESTART, "LAUNCH_FAILED")
    timestamped = (
        "2020-01-15 23:00:50 UTC master.0 -- ORTE was unable to reliably start one or more daemons."
    )
    assert attribute(timestamped)[:2] == (RESTART, "LAUNCH_FAILED")


@pytest.mark.parametrize(
    "host",
    [
        "localhost:4",  # mpirun's `-H localhost:4` taken as one host name
        "export dmlc_role=worker; export dmlc_ps_root_port=9729; expor",  # an empty host field
    ],
)
def test_a_host_name_that_cannot_be_one_is_the_requests_mistake(host: str) -> None:
    log = [
        f"ssh: Could not resolve hostname {host}: Name or service not known",
        "ORTE was unable to reliably start one or more daemons.",
    ]
    assert attribute(*log)[:2] == (STOP, "JOB_REJECTED")


@pytest.mark.parametrize("host", ["worker-1.tfbench-worker", "node-0", "10.0.0.7"])
def test_a_real_host_name_that_does_not_resolve_is_a_launch_failure(host: str) -> None:
    log = [
        f"ssh: Could not resolve hostname {host}: Temporary failure in name resolution",
        "ORTE was unable to reliably start one or more daemons.",
    ]
    assert attribute(*log)[:2] == (RESTART, "LAUNCH_FAILED")


@pytest.mark.parametrize(
    "reason",
    [
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
        "[../third_party/gloo/gloo/transport/tcp/pair.h:301] Connect timeout [none]",
    ],
)
def test_gloos_mesh_not_built_is_a_network_error_on_its_rank(reason: str) -> None:
    # Whatever Gloo's transport says (`no error` when a peer's address was unreachable).
    log = [
        '[rank2]:   File "/usr/lib/python3/torch/distributed/distributed_c10d.py", line 1509',
        f"[rank2]: RuntimeError: Gloo connectFullMesh failed with {reason}",
    ]
    assert attribute(*log) == (RESTART, "NCCL_ERROR", 2)


@pytest.mark.parametrize(
    "lines",
    [
        [
            "[W socket.cpp:464] [c10d] The server socket has failed to bind to 0.0.0.0:29500 "
            "(errno: 98 - Address already in use).",
            "[E socket.cpp:500] [c10d] The server socket has failed to listen on any local "
            "network address.",
        ],
        [
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. The server socket has failed to bind to [::]:29500 (errno: "
            "98 - Address already in use)."
        ],
    ],
)
def test_a_store_that_cannot_listen_on_its_port_is_the_store_lost(lines: list[str]) -> None:
    assert attribute(*lines)[:2] == (RESTART, "STORE_LOST")


def test_nccl_socket_error_quoted_as_an_exceptions_last_error_is_a_network_error() -> None:
    log = [
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, internal "
        "error, NCCL version 2.14.3",
        "ncclInternalError: Internal check failed.",
        "Last error:",
        "Net : Call to recv from 10.58.226.18<38309> failed : Connection refused",
    ]
    assert attribute(*log)[:2] == (RESTART, "NCCL_ERROR")


def test_a_retried_nccl_connect_is_no_failure() -> None:
    log = [
        "n13:941227:943077 [0] NCCL INFO Call to connect returned Connection refused, retrying",
        "step 10 loss 2.3",
    ]
    assert attribute(*log)[0] == ERRORS_NOT_FOUND


@pytest.mark.parametrize("signal", ["SIGUSR1", "SIGUSR2", "SIGHUP"])
def test_submitits_preemption_notice_is_a_termination_from_outside(signal: str) -> None:
    log = [
        "epoch 3 step 1200 loss 1.9",
        f"submitit WARNING (2021-04-01 02:26:27,643) - Caught signal {signal} on learnfair4096: "
        "this job is preempted.",
        "submitit WARNING (2021-04-01 02:26:27,650) - Requeued job 3936 (1 remaining timeouts)",
    ]
    assert attribute(*log)[:2] == (RESTART, "SIGTERM")


@pytest.mark.parametrize(
    "lines",
    [
        ["^CTraceback (most recent call last):", "KeyboardInterrupt", "^CProcess Process-3:2:"],
        [
            "Traceback (most recent call last):",
            '  File "train.py", line 9, in <module>',
            "    loss.backward()",
            "KeyboardInterrupt",
        ],
    ],
)
def test_the_users_interrupt_is_sigint_not_a_code_bug(lines: list[str]) -> None:
    assert attribute("step 10 loss 2.3", *lines)[:2] == (RESTART, "SIGINT")


def test_a_bare_killed_behind_a_ranks_tag_is_that_ranks_sigkill() -> None:
    log = [
        "[0]<stderr>:Killed",
        "[1]<stderr>:terminate called after throwing an instance of 'gloo::IoException'",
        "[1]<stderr>:  what():  [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:589] Read "
        "error [127.0.0.1]:3977: Connection reset by peer",
        "[1]<stderr>:Aborted (core dumped)",
    ]
    assert attribute(*log) == (STOP, "SIGKILL", 0)


@pytest.mark.parametrize(
    "teardown",
    [
        ["slurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2024-01-01T00:00:00 ***"],
        [
            "slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***"
        ],
        ["^CProcess Process-3:2:", "KeyboardInterrupt"],
    ],
)
def test_a_signal_that_tears_down_a_job_after_an_exception_is_its_consequence(
    teardown: list[str],
) -> None:
    log = [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "    main()",
        "ValueError: shapes (3,) and (4,) not aligned",
        *teardown,
    ]
    result = attribute_log("\n".join(log) + "\n")
    assert (result.decision, result.fault_class) == (STOP, "WORKLOAD_EXC")
    assert "what failed after it (line" in result.explanation


def test_weaker_evidence_before_the_root_is_not_said_to_come_after_it() -> None:
    log = [
        "[E socket.cpp:500] The client socket has timed out after 60s while trying to connect to "
        "(n1, 29500)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]
    result = attribute_log("\n".join(log) + "\n")
    assert result.fault_class == "CUDA_OOM"
    assert "weaker evidence before it (line 1)" in result.explanation
    assert "after it" not in result.explanation


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: Unable to create step for job 17627941: Requested node configuration is not "
        "available",
        "srun: error: Unable to create step for job 16413634: Invalid generic resource (gres) "
        "specification",
        "salloc: error: Job submit/allocate failed: Job violates accounting/QOS policy (job submit "
        "limit, user's size and/or time limits)",
    ],
)
def test_slurms_refusal_is_the_requests_mistake_whatever_the_request(line: str) -> None:
    assert attribute(line)[:2] == (STOP, "JOB_REJECTED")


def test_a_step_that_cannot_be_created_for_want_of_free_memory_is_no_refusal() -> None:
    line = (
        "srun: error: Unable to create step for job 29986033: Memory required by task is not "
        "available"
    )
    assert attribute(line)[1] != "JOB_REJECTED"


def test_open_mpis_report_of_an_abort_is_an_abort() -> None:
    log = [
        "python: malloc.c:3722: _int_malloc: Assertion `(unsigned long) (size) >= (unsigned long) "
        "(nb)' failed.",
        "[node00:13555] *** Process received signal ***",
        "[node00:13555] Signal: Aborted (6)",
        "[node00:13555] Signal code:  (-6)",
    ]
    assert attribute(*log)[:2] == (STOP, "OS_ABORT")


def test_a_step_cancelled_due_to_a_task_failure_is_that_failures_consequence() -> None:
    cancel = (
        "slurmstepd: error: *** STEP 52222788.0 ON nid002888 CANCELLED AT 2026-04-29T23:36:37 "
        "DUE TO TASK FAILURE ***"
    )
    # Alone: a task failed, by an exit code the log does not hold; not a signal from outside.
    assert attribute("step 10 loss 2.3", cancel)[:2] == (STOP, "WORKLOAD_EXC")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert attribute(oom, cancel)[:2] == (STOP, "CUDA_OOM")


@pytest.mark.parametrize(
    "kind", ["internal error - please report this issue to the NCCL developers", "unhandled "
             "system error (run with NCCL_DEBUG=INFO for details)"],
)  # fmt: skip
def test_an_nccl_error_raised_with_nothing_before_it_is_a_network_error(kind: str) -> None:
    log = [
        "step 10 loss 2.3",
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
        f"c10d/NCCLUtils.hpp:317, {kind}, NCCL version 2.21.5",
        "[rank1]: ncclInternalError: Internal check failed.",
        "[rank1]: Last error:",
    ]
    assert attribute(*log) == (RESTART, "NCCL_ERROR", 1)


def test_what_nccls_last_error_names_is_the_failure() -> None:
    log = [
        "[rank2]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2028, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        "[rank2]: ncclSystemError: System call (e.g. socket, malloc) or external library call "
        "failed or device error. ",
        "[rank2]: Last error:",
        "[rank2]: Error while creating shared memory segment /dev/shm/nccl-c8G2vd (size 5767520)",
    ]
    assert attribute(*log) == (STOP, "SHM_FULL", 2)
    fallocate = (
        "gpu2-ru7:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No "
        "space left on device"
    )
    assert attribute(fallocate)[:2] == (STOP, "SHM_FULL")


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("RuntimeError: cuda runtime error (101) : invalid device ordinal at /opt/conda/conda-bld"
         "/pytorch_1595629427478/work/torch/csrc/cuda/Module.cpp:59", "GPU_ERROR"),
        ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/"
         "THCStorage.cu:58", "CUDA_OOM"),
    ],
)  # fmt: skip
def test_older_torchs_cuda_runtime_error_is_a_cuda_error(line: str, fault: str) -> None:
    assert attribute(line)[1] == fault


def test_tasks_srun_terminated_after_a_task_failure_are_slurms_teardown() -> None:
    log = [
        "[2026-04-29T23:36:37.809] error: *** STEP 52222788.0 ON nid002888 CANCELLED AT "
        "2026-04-29T23:36:37 DUE TO TASK FAILURE ***",
        "srun: error: nid002888: tasks 0-57,59-63: Terminated",
        "srun: Force Terminated StepId=52222788.0",
    ]
    assert attribute(*log)[:2] == (STOP, "WORKLOAD_EXC")


RAY_WORKER_DIED = (
    "(raylet) A worker died or was killed while executing a task by an unexpected system error. "
    "To troubleshoot the problem, check the logs for the dead worker. Worker exit type: "
    "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. "
    "End of file. There are some potential root causes. (1) The process is killed by SIGKILL by "
    "OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is "
    "crashed unexpectedly due to SIGSEGV or other unexpected errors."
)


def test_rays_guesses_at_why_a_worker_died_are_not_evidence_of_a_segfault() -> None:
    # Alone: killed, Ray's first guess; never the SIGSEGV its list mentions.
    assert attribute(RAY_WORKER_DIED, "(TorchTrainer pid=89392) Worker 0 has failed.")[:2] == (
        STOP,
        "SIGKILL",
    )
    # What the log says after it is the failure.
    nccl = (
        "(RayWorkerWrapper pid=92234) [rank1]:[E1224 13:23:05.483840160 ProcessGroupNCCL.cpp:542] "
        "[Rank 12] Collective WorkNCCL(SeqNum=1, OpType=BROADCAST) raised the following async "
        "exception: NCCL error: remote process exited or there was a network error"
    )
    assert attribute(RAY_WORKER_DIED, nccl)[:2] == (RESTART, "NCCL_ERROR")


@pytest.mark.parametrize(
    "line",
    [
        "F0308 17:17:08.399897 46342 SocketChannel.cpp:54] Check failed: len >= 0  "
        "peer=10.89.199.23: Connection reset by peer [104]",
        "LightNetwork.cpp:397] Check failed: error >= 0 ERROR connecting to 10.87.101.33: "
        "Connection refused [111]",
    ],
)
def test_a_failed_check_over_a_peers_connection_is_a_network_error(line: str) -> None:
    assert attribute(line)[:2] == (RESTART, "NCCL_ERROR")
