"""bench.operator's profile summary: each py-spy sample goes to the innermost frame's part of the work."""

from __future__ import annotations

from pathlib import Path

from bench.operator import category, profile_summary

LOOP = "run_from_args (mpiop/process.py:288);Runner.run (asyncio/runners.py:118)"
WATCH = f"{LOOP};Informer.run (mpiop/kube/informer.py:181);KubeClient.watch (mpiop/kube/client.py:382)"
RECONCILE = (f"{LOOP};Manager._process (mpiop/controller/manager.py:223);"
             "Reconciler.reconcile (mpiop/controller/reconciler.py:106)")


def test_the_innermost_known_frame_names_the_part() -> None:
    cases = {
        f"{WATCH};decode_event (mpiop/kube/codec.py:104)": "decode",
        f"{WATCH};Informer._set (mpiop/kube/informer.py:135);trim (mpiop/podstate.py:313)": "trim",
        f"{WATCH};Informer._put (mpiop/kube/informer.py:145)": "cache",
        f"{RECONCILE};decide (mpiop/decide.py:73);format_time (mpiop/api/v2beta1.py:53)": "decide",
        f"{RECONCILE};KubeClient.create (mpiop/kube/client.py:275);encode (mpiop/kube/codec.py:47)": "encode",
        f"{RECONCILE};KubeClient._send (mpiop/kube/client.py:218);ClientSession._request (aiohttp/client.py:1)": "HTTP",
        f"{RECONCILE};all_or_none (mpiop/controller/reconciler.py:61)": "reconcile",
        f"{LOOP};_compile_bytecode (<frozen importlib._bootstrap_external>:729)": "other",
    }
    assert {stack: category(stack.split(";")) for stack in cases} == cases


def test_the_split_leaves_the_idle_loop_and_the_metrics_thread_out(tmp_path: Path) -> None:
    raw = tmp_path / "operator.raw"
    raw.write_text(f"{WATCH};decode_event (mpiop/kube/codec.py:104) 30\n"
                   f"{RECONCILE};decide (mpiop/decide.py:73) 10\n"
                   f"{LOOP} 500\n"
                   f"{LOOP};run_forever (asyncio/base_events.py:607);EpollSelector.select (selectors.py:468) 300\n"
                   "Thread._bootstrap (threading.py:1002);serve_forever (socketserver.py:233) 400\n")
    lines = profile_summary(raw)
    assert lines[0] == "    split: decode 75.0%, decide 25.0% (40 samples at 100/s)"
