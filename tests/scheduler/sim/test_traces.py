"""Trace loaders: every real openb list and the Philly sample load; malformed rows give ``file:line: why``."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim.traces import (
    TraceError,
    TraceNode,
    TracePod,
    load_openb_nodes,
    load_openb_pods,
    load_philly_runtimes,
)
from scheduler.sim.traces.rows import MAX_LISTED

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "traces"
OPENB = TRACES / "alibaba-openb-2023"
PHILLY = TRACES / "philly" / "philly_runtime.csv"
NO_TRACES = f"the shared traces are not beside the project ({TRACES} is absent)"

POD_LISTS = sorted(OPENB.glob("openb_pod_list_*.csv")) if OPENB.is_dir() else []
NODE_LISTS = sorted(OPENB.glob("openb_node_list_*.csv")) if OPENB.is_dir() else []

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
GOOD_POD = "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,100,0"
P = "openb-pod-0001,1000,10,"  # name, cpu_milli, memory_mib of most bad rows below
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def data_rows(path: Path) -> int:
    """Non-blank lines after the header."""
    with path.open(encoding="utf-8") as handle:
        return sum(1 for text in handle if text.strip()) - 1


@pytest.mark.skipif(not OPENB.is_dir(), reason=NO_TRACES)
def test_all_pod_lists_and_both_node_lists_are_present() -> None:
    # The folder README says 23 pod lists, but its own tables name 24 (9 cpu, default, 5 gpushare, 5 gpuspec,
    # 4 multigpu) and 24 are there; the FGD matrix uses 17 of them.
    assert len(POD_LISTS) == 24
    assert [path.name for path in NODE_LISTS] == ["openb_node_list_all_node.csv", "openb_node_list_gpu_node.csv"]


@pytest.mark.skipif(not OPENB.is_dir(), reason=NO_TRACES)
@pytest.mark.parametrize("path", POD_LISTS, ids=lambda path: path.stem)
def test_every_real_pod_list_loads_whole(path: Path) -> None:
    pods = load_openb_pods(path)
    assert len(pods) == data_rows(path)
    assert all(isinstance(pod, TracePod) for pod in pods)
    assert len({pod.name for pod in pods}) == len(pods)


@pytest.mark.skipif(not OPENB.is_dir(), reason=NO_TRACES)
@pytest.mark.parametrize("path", NODE_LISTS, ids=lambda path: path.stem)
def test_every_real_node_list_loads_whole(path: Path) -> None:
    nodes = load_openb_nodes(path)
    assert len(nodes) == data_rows(path)
    assert all(isinstance(node, TraceNode) for node in nodes)


@pytest.mark.skipif(not OPENB.is_dir(), reason=NO_TRACES)
def test_default_trace_matches_its_readme() -> None:
    pods = load_openb_pods(OPENB / "openb_pod_list_default.csv")
    nodes = load_openb_nodes(OPENB / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213
    assert sum(node.gpus for node in nodes) == 6212
    assert sum(node.cpu_milli for node in nodes) == 107_018_000
    assert sum(pod.gpu_request_milli for pod in pods) == 6_086_800
    assert sum(1 for pod in pods if pod.num_gpu == 0) == 1088
    assert pods[1] == TracePod(
        name="openb-pod-0001",
        cpu_milli=6000,
        memory_mib=12288,
        num_gpu=1,
        gpu_milli=460,
        gpu_spec=(),
        qos="LS",
        pod_phase="Running",
        creation_time_s=427061,
        deletion_time_s=12902960,
        scheduled_time_s=427061,
    )


@pytest.mark.skipif(not OPENB.is_dir(), reason=NO_TRACES)
def test_multigpu_files_have_no_details_and_gpuspec_repeats_are_folded() -> None:
    multigpu = load_openb_pods(OPENB / "openb_pod_list_multigpu20.csv")
    assert multigpu[0].qos is None and multigpu[0].creation_time_s is None
    spec = load_openb_pods(OPENB / "openb_pod_list_gpuspec05.csv")
    assert spec[2184 - 2].gpu_spec == ("V100M16", "V100M32")


@pytest.mark.skipif(not PHILLY.is_file(), reason=NO_TRACES)
def test_philly_runtimes_load_whole() -> None:
    runtimes_s = load_philly_runtimes(PHILLY)
    assert len(runtimes_s) == 83_154
    assert max(runtimes_s) == 4_628_239


BAD_POD_ROWS = [
    ("openb-pod-0001,-5,16384,1,1000,,LS,Running,0,100,0", "cpu_milli: must be ≥ 0, got -5"),
    ("openb-pod-0001,1.5,16384,1,1000,,LS,Running,0,100,0", "cpu_milli: expected an integer, got '1.5'"),
    ("openb-pod-0001,1000,,1,1000,,LS,Running,0,100,0", "memory_mib: expected an integer, got ''"),
    ("openb-pod-0001,1000,-1,1,1000,,LS,Running,0,100,0", "memory_mib: must be ≥ 0, got -1"),
    (P + "3,1000,,LS,Running,0,100,0", "num_gpu: must be one of 0, 1, 2, 4, 8, got 3"),
    (P + "-1,1000,,LS,Running,0,100,0", "num_gpu: must be ≥ 0, got -1"),
    (P + "1,1001,,LS,Running,0,100,0", "gpu_milli: must be ≤ 1000 (one whole GPU), got 1001"),
    (P + "1,-3,,LS,Running,0,100,0", "gpu_milli: must be ≥ 0, got -3"),
    (
        P + "0,500,,LS,Running,0,100,0",
        "gpu_milli: must be 0 for a pod without GPUs (num_gpu 0), got 500",
    ),
    (P + "1,0,,LS,Running,0,100,0", "gpu_milli: must be > 0 for a pod with num_gpu 1"),
    (
        P + "2,500,,LS,Running,0,100,0",
        "gpu_milli: must be 1000 for a multi-GPU pod (num_gpu 2), got 500",
    ),
    (P + "1,500,H100,LS,Running,0,100,0", "gpu_spec: unknown GPU model(s) 'H100'"),
    (
        P + "0,0,T4,LS,Running,0,100,0",
        "gpu_spec: a pod without GPUs cannot constrain the GPU model, got 'T4'",
    ),
    (P + "1,500,,XX,Running,0,100,0", "qos: must be one of BE, Burstable, Guaranteed, LS, got 'XX'"),
    (
        P + "1,500,,LS,Done,0,100,0",
        "pod_phase: must be one of Failed, Pending, Running, Succeeded, got 'Done'",
    ),
    (P + "1,500,,LS,Pending,50,10,", "deletion_time: 10 is before creation_time 50"),
    (
        P + "1,500,,LS,Running,50,100,",
        "scheduled_time: empty, but only a Pending pod is unscheduled (pod_phase Running)",
    ),
    (
        P + "1,500,,LS,Pending,50,100,60",
        "scheduled_time: a Pending pod was never scheduled, got '60'",
    ),
    (P + "1,500,,LS,Running,50,100,40", "scheduled_time: 40 is before creation_time 50"),
    (P + "1,500,,LS,Running,50,100,140", "scheduled_time: 140 is after deletion_time 100"),
    (P + "1,500,,LS,Running,x,100,50", "creation_time: expected an integer, got 'x'"),
    (",1000,10,1,500,,LS,Running,0,100,0", "name: must not be empty"),
    ("openb-pod-0000,1000,10,1,500,,LS,Running,0,100,0", "name: duplicate pod 'openb-pod-0000' (first on line 2)"),
    (P + "1,500,,LS,Running,0,100", "expected 11 fields, got 10"),
]


@pytest.mark.parametrize(("row", "message"), BAD_POD_ROWS, ids=[message for _, message in BAD_POD_ROWS])
def test_a_bad_pod_row_is_reported_with_its_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(f"{POD_HEADER}\n{GOOD_POD}\n{row}\n", encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_openb_pods(path)
    assert caught.value.errors == (f"{path}:3: {message}",)
    assert caught.value.total == 1


BAD_NODE_ROWS = [
    ("n1,0,1024,2,T4", "cpu_milli: must be ≥ 1, got 0"),
    ("n1,1000,0,2,T4", "memory_mib: must be ≥ 1, got 0"),
    ("n1,1000,1024,-2,T4", "gpu: must be ≥ 0, got -2"),
    ("n1,1000,1024,0,T4", "model: must be empty on a node without GPUs, got 'T4'"),
    ("n1,1000,1024,2,", "model: a node with 2 GPUs needs a GPU model"),
    ("n1,1000,1024,2,H100", "model: unknown GPU model 'H100' (known: A10, G1, G2, G3, P100, T4, V100M16, V100M32)"),
    (",1000,1024,2,T4", "sn: must not be empty"),
    ("n0,1000,1024,2,T4", "sn: duplicate node 'n0' (first on line 2)"),
]


@pytest.mark.parametrize(("row", "message"), BAD_NODE_ROWS, ids=[message for _, message in BAD_NODE_ROWS])
def test_a_bad_node_row_is_reported_with_its_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(f"{NODE_HEADER}\nn0,96000,262144,8,G2\n{row}\n", encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_openb_nodes(path)
    assert caught.value.errors == (f"{path}:3: {message}",)


BAD_RUNTIME_ROWS = [
    ("-1.0", "runtime: must be ≥ 0, got -1.0"),
    ("soon", "runtime: expected a number, got 'soon'"),
    ("inf", "runtime: must be a finite number, got 'inf'"),
    ("1,2", "expected 1 fields, got 2"),
]


@pytest.mark.parametrize(("row", "message"), BAD_RUNTIME_ROWS, ids=[message for _, message in BAD_RUNTIME_ROWS])
def test_a_bad_runtime_row_is_reported_with_its_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "runtime.csv"
    path.write_text(f"runtime\n0.0\n{row}\n", encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_philly_runtimes(path)
    assert caught.value.errors == (f"{path}:3: {message}",)


def test_every_problem_of_a_row_and_of_the_file_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(f"{POD_HEADER}\n{GOOD_POD}\n\nx,-1,-1,1,0,,LS,Running,0,100,0\n", encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_openb_pods(path)
    assert caught.value.errors == (
        f"{path}:4: cpu_milli: must be ≥ 0, got -1",
        f"{path}:4: memory_mib: must be ≥ 0, got -1",
        f"{path}:4: gpu_milli: must be > 0 for a pod with num_gpu 1",
    )


def test_the_list_is_capped_and_the_rest_counted(tmp_path: Path) -> None:
    path = tmp_path / "runtime.csv"
    path.write_text("runtime\n" + "-1\n" * (MAX_LISTED + 7), encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_philly_runtimes(path)
    assert len(caught.value.errors) == MAX_LISTED
    assert caught.value.total == MAX_LISTED + 7
    assert str(caught.value).endswith(f"... and 7 more problems in {path}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file: expected a header line"),
        ("name,cpu\n", "header 'name,cpu' does not match the expected columns"),
    ],
)
def test_a_bad_header_is_reported_on_line_1(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_openb_pods(path)
    assert caught.value.errors[0].startswith(f"{path}:1: {message}")


def test_the_multigpu_header_is_accepted_in_any_column_order(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("num_gpu,name,cpu_milli,memory_mib,gpu_milli\n2,p,1000,10,1000\n", encoding="utf-8")
    assert load_openb_pods(path) == (TracePod(name="p", cpu_milli=1000, memory_mib=10, num_gpu=2, gpu_milli=1000),)


def test_a_missing_file_and_undecodable_bytes_are_reported(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"missing\.csv: no such file"):
        load_philly_runtimes(tmp_path / "missing.csv")
    path = tmp_path / "runtime.csv"
    path.write_bytes(b"runtime\n1.0\n\xff\xfe\n")
    with pytest.raises(TraceError, match="not UTF-8 text"):
        load_philly_runtimes(path)


def test_a_malformed_csv_record_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "runtime.csv"
    path.write_text("runtime\n1.0\n" + "9" * 200_000 + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"runtime\.csv:3: malformed CSV: field larger than field limit"):
        load_philly_runtimes(path)
