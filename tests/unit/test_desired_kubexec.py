"""mpiop.desired.kubexec: exec launch's pods (no SSH key, no sshd) and kubexec.sh, mpirun's remote agent."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mpiop.api.v2beta1 import MPIImplementation
from mpiop.desired import kubexec, objects
from mpiop.desired.pods import launcher_pod, worker_pod
from mpiop.desired.settings import Settings
from testkit.mpijobs import make_mpijob
from testkit.pods import env_of

EXEC = Settings(default_launch="exec", kubectl_image="example.org/kubectl:v1.34.4")
AGENT = "/etc/mpi/kubexec.sh"


@pytest.mark.parametrize(("implementation", "wanted"), [
    ("OpenMPI", {"OMPI_MCA_plm_rsh_agent": AGENT, "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
                 "PRTE_MCA_plm_ssh_agent": AGENT, "PRTE_MCA_plm_ssh_no_tree_spawn": "1"}),
    ("Intel", {"I_MPI_HYDRA_BOOTSTRAP": "rsh", "I_MPI_HYDRA_BOOTSTRAP_EXEC": AGENT}),
    ("MPICH", {"HYDRA_LAUNCHER": "rsh", "HYDRA_LAUNCHER_EXEC": AGENT}),
])
def test_each_mpi_is_pointed_at_the_agent_and_given_no_ssh_arguments(implementation: MPIImplementation,
                                                                     wanted: dict[str, str]) -> None:
    env = env_of(launcher_pod(make_mpijob("pi").implementation(implementation).obj(), 0, settings=EXEC)
                 ["spec"]["containers"][0])
    assert {k: env.get(k) for k in wanted} == wanted
    assert not {"OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                "HYDRA_LAUNCH_EXTRA_ARGS", "HYDRA_LAUNCHER_EXTRA_ARGS"} & env.keys()
    assert env["OMPI_MCA_orte_default_hostfile" if implementation == "OpenMPI" else
               "I_MPI_HYDRA_HOST_FILE" if implementation == "Intel" else "HYDRA_HOST_FILE"] == "/etc/mpi/hostfile"


def test_the_launcher_runs_as_its_account_with_kubectl_and_no_ssh_key() -> None:
    pod = launcher_pod(make_mpijob("pi", "ml").obj(), 2, settings=EXEC)
    spec = pod["spec"]
    assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == ("pi-uidpi-launcher", True)
    assert [v["name"] for v in spec["volumes"]] == ["mpi-job-config", "mpiop-kubectl"]
    assert {"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555} in spec["volumes"][0]["configMap"]["items"]
    [delivery] = spec["initContainers"]
    assert delivery["image"] == "example.org/kubectl:v1.34.4"
    assert delivery["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                           "readOnlyRootFilesystem": True}
    env = env_of(spec["containers"][0])
    assert (env["MPIOP_LAUNCHER_POD"], env["MPIOP_LAUNCHER_HOST"], env["MPIOP_NAMESPACE"]) == (
        "pi-launcher-2", "pi-launcher", "ml")


def test_workers_wait_without_sshd_key_or_token_and_a_users_command_wins() -> None:
    pod = worker_pod(make_mpijob("pi").obj(), 0, 0, settings=EXEC)
    assert pod["spec"]["containers"][0]["command"] == kubexec.WORKER_WAIT_COMMAND
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["mpi-job-config"]  # the agent (Open MPI checks it)
    assert pod["spec"]["automountServiceAccountToken"] is False
    own = worker_pod(make_mpijob("pi").command("Worker", "python", "serve.py").obj(), 0, 0, settings=EXEC)
    assert own["spec"]["containers"][0]["command"] == ["python", "serve.py"]


def test_only_exec_jobs_get_the_agent_in_their_config_map() -> None:
    job = make_mpijob("pi").obj()
    assert kubexec.SCRIPT_NAME not in objects.config_map_data(job, [])
    assert objects.config_map_data(job, [], exec_launch=True)[kubexec.SCRIPT_NAME] == kubexec.SCRIPT


@pytest.fixture
def agent(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """kubexec.sh with a kubectl stand-in that logs its arguments, reports every pod Running and runs an exec's
    command here, so the script's own parsing, stdio and exit code are what is tested."""
    script = tmp_path / "kubexec.sh"
    script.write_text(kubexec.SCRIPT)
    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\necho "$*" >> "$KUBECTL_LOG"\n'
                       'case " $* " in *" get pod "*) echo Running; exit 0;; esac\n'
                       'for last; do :; done\nexec /bin/sh -c "$last"\n')
    for path in (script, kubectl):
        path.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "KUBECTL_LOG": str(tmp_path / "log"), "MPIOP_KUBECTL": str(kubectl),
           "MPIOP_KUBECTL_CACHE": str(tmp_path / "cache"), "MPIOP_NAMESPACE": "ml",
           "MPIOP_LAUNCHER_HOST": "pi-launcher", "MPIOP_LAUNCHER_POD": "pi-launcher-1",
           "MPIOP_LAUNCHER_CONTAINER": "launcher", "MPIOP_WORKER_CONTAINER": "worker", "MPIOP_POD_WAIT_SECONDS": "2",
           "MPIOP_TERMINATION_LOG": str(tmp_path / "termination-log")}
    (tmp_path / "termination-log").write_text("")
    return script, env


@pytest.mark.parametrize(("argv", "pod", "container"), [
    (["pi-worker-1.pi.ml.svc", "echo", "out;", "echo", "err", ">&2;", "exit", "3"], "pi-worker-1", "worker"),
    (["-o", "ConnectionAttempts=10", "-x", "pi-worker-0", "echo out; echo err >&2; exit 3"], "pi-worker-0",
     "worker"),
    (["pi-launcher.pi.ml.svc.cluster.local", "echo out; echo err >&2; exit 3"], "pi-launcher-1", "launcher"),
], ids=["fqdn-words", "ssh-options", "working-launcher"])
def test_kubexec_maps_the_host_to_its_pod_and_passes_stdio_and_exit_code(agent: tuple[Path, dict[str, str]],
                                                                         argv: list[str], pod: str,
                                                                         container: str) -> None:
    script, env = agent
    done = subprocess.run([str(script), *argv], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    calls = Path(env["KUBECTL_LOG"]).read_text().splitlines()
    assert calls[-1].startswith(f"--namespace ml --cache-dir {env['MPIOP_KUBECTL_CACHE']} exec -i {pod} "
                                f"--container {container} -- /bin/sh -c ")


@pytest.mark.parametrize(("runtime", "code"), [
    ('OCI runtime exec failed: exec failed: unable to start container process: exec: "/bin/sh": stat /bin/sh: no '
     "such file or directory: unknown\ncommand terminated with exit code 126", 126),
    ('error: Internal error occurred: error executing command in container: failed to exec in container: failed to '
     'start exec "f8": OCI runtime exec failed: exec failed: unable to start container process: exec: "/bin/sh": '
     "executable file not found in $PATH: unknown", 1),
], ids=["streamed-126", "internal-error-1"])
def test_kubexec_says_plainly_when_the_pod_has_no_shell(agent: tuple[Path, dict[str, str]], runtime: str,
                                                       code: int) -> None:
    """kubectl's exec fails as the runtime cannot start /bin/sh: a line naming the pod and /bin/sh, exit 127."""
    script, env = agent
    kubectl = Path(env["MPIOP_KUBECTL"])
    kubectl.write_text('#!/bin/sh\necho "$*" >> "$KUBECTL_LOG"\n'
                       'case " $* " in *" get pod "*) echo Running; exit 0;; esac\n'
                       f"cat >&2 <<'EOF'\n{runtime}\nEOF\nexit {code}\n")
    done = subprocess.run([str(script), "pi-worker-1.pi.ml.svc", "orted", "-mca", "x"], env=env, capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 127
    said = done.stderr.splitlines()[-1]
    # The termination message (for the failure report, which keeps its last 512 characters): the line without the
    # runtime's words.
    assert Path(env["MPIOP_TERMINATION_LOG"]).read_text() == said.split("; the runtime said:")[0] + "\n"
    assert said == ("kubexec.sh: pod pi-worker-1 cannot run /bin/sh (container worker): exec launch starts every "
                    "remote command with /bin/sh -c, so the image needs one; the runtime said: "
                    + runtime.replace("\n", " ") + " "), done.stderr


def test_kubexec_passes_a_failing_commands_code_on_when_the_shell_is_there(agent: tuple[Path, dict[str, str]]) -> None:
    script, env = agent
    done = subprocess.run([str(script), "pi-worker-0", "exit 1"], env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    assert (done.returncode, done.stderr) == (1, "")


def test_kubexec_passes_its_stdin_to_the_remote_command(agent: tuple[Path, dict[str, str]]) -> None:
    """Hydra's proxies and Open MPI's daemons read the agent's stdin: it reaches kubectl, not /dev/null."""
    script, env = agent
    done = subprocess.run([str(script), "pi-worker-0", "cat; echo end"], env=env, input="hi\nthere\n",
                          capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "hi\nthere\nend\n", "")


def test_kubexec_runs_with_its_stdin_closed(agent: tuple[Path, dict[str, str]]) -> None:
    """A caller may close the agent's stdin: the remote command reads nothing, rather than the agent failing."""
    script, env = agent
    done = subprocess.run(["/bin/sh", "-c", f'exec {script} pi-worker-0 "cat; echo end" <&-'], env=env,
                          capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "end\n", "")


def _runs(pid_file: Path, cmdline: bytes) -> bool:
    """Whether the process whose pid `pid_file` holds runs `cmdline` (NUL-separated, as /proc has it)."""
    pid = pid_file.read_text().strip() if pid_file.exists() else ""
    try:
        return bool(pid) and Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline
    except FileNotFoundError:
        return False


def _default_signal_handling() -> None:
    """The agent starts with every signal at its default, as PRRTE and Hydra start their launch agents. A test
    runner started by `nohup` or in a non-interactive shell's background inherits INT and HUP ignored, and sh
    cannot trap a signal that was ignored when it started, so without this the test would depend on how pytest
    itself was started."""
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["TERM", "INT", "HUP"])
def test_kubexec_passes_a_signal_on_to_kubectl(agent: tuple[Path, dict[str, str]], sent: signal.Signals) -> None:
    """mpirun stopping its agent stops kubectl too (as TERM: sh starts a background command with INT ignored);
    the agent exits with kubectl's code, never leaving it behind."""
    script, env = agent
    kubectl = Path(env["MPIOP_KUBECTL"])
    started = kubectl.with_name("kubectl-pid")
    kubectl.write_text('#!/bin/sh\ncase " $* " in *" get pod "*) echo Running; exit 0;; esac\n'
                       f'echo $$ > {started}\nfor last; do :; done\nexec /bin/sh -c "$last"\n')
    agent_process = subprocess.Popen([str(script), "pi-worker-0", "exec sleep 300"], env=env,
                                     stdin=subprocess.DEVNULL, preexec_fn=_default_signal_handling)
    try:
        deadline = time.monotonic() + 10
        while not _runs(started, b"sleep\x00300\x00"):  # kubectl's command runs; the agent goes on to its wait
            assert time.monotonic() < deadline and agent_process.poll() is None, "kubectl's command never ran"
            time.sleep(0.05)  # poll interval: another process's state, read off /proc
        agent_process.send_signal(sent)
        assert agent_process.wait(timeout=10) == 128 + signal.SIGTERM
        with pytest.raises(ProcessLookupError):
            os.kill(int(started.read_text()), 0)
    finally:  # a failure leaves nothing running either
        agent_process.kill()
        if started.exists() and started.read_text().strip():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(started.read_text()), signal.SIGKILL)


def test_kubexec_without_a_command_says_how_to_call_it(agent: tuple[Path, dict[str, str]]) -> None:
    script, env = agent
    done = subprocess.run([str(script), "pi-worker-0"], env=env, capture_output=True, text=True, timeout=30,
                          check=False)
    assert (done.returncode, done.stderr) == (255, "kubexec.sh: usage: kubexec.sh HOST COMMAND...\n")
