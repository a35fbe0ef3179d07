"""Tests of converse_ccs against a live converse-rs job: the ccs_progress example.

Run with pytest (from the repository root):

    pytest python/                       # skips these tests if the job is not built
    CONVERSE_TEST_PYTHON_LIVE=1 pytest python/              # missing job = failure
    CONVERSE_CONVRUN=target/release/convrun pytest python/  # two processes

Environment:

* ``CONVERSE_CCS_JOB``: the ccs_progress binary (default
  ``<repo>/target/release/examples/ccs_progress``).
* ``CONVERSE_CONVRUN``: if set, the job runs as ``convrun +p 4 ++ppn 2 JOB``
  (two processes of two PEs) instead of one process of four PEs.
* ``CONVERSE_TEST_PYTHON_LIVE=1``: a missing job fails the tests instead of
  skipping them.

Each job counts the primes below N = 1 000 000, so once it has finished its
``progress`` replies are known exactly (computed here with a sieve).
``converse_ccs`` is whatever ``import converse_ccs`` finds: the installed
package (with ``--import-mode=importlib``, as .ci/python-check runs it) or
the file beside this one.
"""

from __future__ import annotations

import math
import os
import re
import signal
import struct
import subprocess
import sys
import sysconfig
import threading
import time
import unittest

try:
    import pytest
except ImportError:  # `python -m unittest` discovers this file too
    raise unittest.SkipTest("test_live_job.py runs under pytest") from None

import converse_ccs

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_JOB = os.path.join(REPO, "target", "release", "examples", "ccs_progress")

N = 1_000_000  # the job counts the primes in 2..N
PES = 4
START_TIMEOUT = 30.0  # for the job to print its port
CCS_TIMEOUT = 10.0  # every network step of a request
COUNT_TIMEOUT = 120.0  # for the job to finish counting
EXIT_TIMEOUT = 30.0  # for the job to exit after `stop`
CLI_TIMEOUT = 30.0

PORT_LINE = re.compile(r"^ccs: Server IP = .*, Server port = (\d+) \$$", re.M)
OTP_LINE = re.compile(r"^CCS_OTP_KEY> Level 0 key: ([0-9A-Fa-f]{32})$", re.M)


# ---------------------------------------------------------------------------
# What the job must answer
# ---------------------------------------------------------------------------


def expected_progress(n: int = N, pes: int = PES) -> list:
    """Each PE's final (checked, primes), splitting 2..n as ccs_progress.rs does."""
    sieve = bytearray([1]) * n
    sieve[:2] = b"\0\0"
    for i in range(2, math.isqrt(n - 1) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytes(len(range(i * i, n, i)))
    share = -(-n // pes)
    result = []
    for me in range(pes):
        first = max(me * share, 2)
        end = max(min((me + 1) * share, n), first)
        result.append((end - first, sieve[first:end].count(1)))
    return result


EXPECTED = expected_progress()
TOTAL = (sum(c for c, _ in EXPECTED), sum(p for _, p in EXPECTED))
assert TOTAL == (N - 2, 78498)  # pi(10**6)


def decode(reply: bytes) -> tuple:
    """A progress reply: two big-endian int32, (numbers checked, primes found)."""
    assert len(reply) == 8, f"a progress reply is 8 bytes, got {reply!r}"
    return struct.unpack(">ii", reply)


# ---------------------------------------------------------------------------
# Running a job
# ---------------------------------------------------------------------------


def _live_required() -> bool:
    return os.environ.get("CONVERSE_TEST_PYTHON_LIVE", "") not in ("", "0")


def job_command(*server_flags: str) -> tuple:
    """The command line of a job serving CCS, and its expected node sizes."""
    job = os.environ.get("CONVERSE_CCS_JOB") or DEFAULT_JOB
    if not (os.path.isfile(job) and os.access(job, os.X_OK)):
        reason = (
            f"no ccs_progress job at {job} (build it with `cargo build --release --example "
            "ccs_progress`, or set CONVERSE_CCS_JOB)"
        )
        if _live_required():
            pytest.fail(reason + "; CONVERSE_TEST_PYTHON_LIVE is set", pytrace=False)
        pytest.skip(reason)
    convrun = os.environ.get("CONVERSE_CONVRUN")
    if convrun:
        if not (os.path.isfile(convrun) and os.access(convrun, os.X_OK)):
            pytest.fail(f"CONVERSE_CONVRUN={convrun} is not an executable", pytrace=False)
        return [convrun, "+p", str(PES), "++ppn", "2", job, str(N), "++server", *server_flags], [2, 2]
    return [job, str(N), "+p", str(PES), "++server", "++server-port", "0", *server_flags], [PES]


class Job:
    """A job in its own process group, its output (stdout and stderr) collected."""

    def __init__(self, command: list, node_sizes: list):
        self.command = command
        self.node_sizes = node_sizes
        self._lines: list = []
        self._eof = False
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so that end() reaches convrun's children too
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.port = int(self.wait_for(PORT_LINE, START_TIMEOUT).group(1))
        except BaseException:
            self.end()
            raise

    def _read(self) -> None:
        for raw in self.proc.stdout:
            with self._cond:
                self._lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def output(self) -> str:
        with self._cond:
            return "\n".join(self._lines)

    def wait_for(self, pattern: re.Pattern, timeout: float) -> re.Match:
        """Wait until the output has a line matching ``pattern``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                match = pattern.search("\n".join(self._lines))
                if match:
                    return match
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    why = "exited" if self._eof else f"did not print it within {timeout} s"
                    raise AssertionError(
                        f"waiting for /{pattern.pattern}/: the job {why}\n"
                        f"command: {self.command}\noutput:\n" + "\n".join(self._lines)
                    )
                self._cond.wait(remaining)

    def client(self, **kwargs) -> converse_ccs.CcsClient:
        """A client of the job. It may connect as soon as the port is printed:
        the server holds a request for a handler the PEs have not registered
        yet until they have."""
        kwargs.setdefault("timeout", CCS_TIMEOUT)
        return converse_ccs.CcsClient("127.0.0.1", self.port, **kwargs)

    def wait_exit(self, timeout: float = EXIT_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the job did not exit within {timeout} s\noutput:\n{self.output()}"
            ) from None

    def end(self) -> None:
        """End the job if it still runs, and anything left of its process group.

        SIGTERM first: convrun then ends its processes and removes their
        shared-memory names (a SIGKILLed convrun would leave them in
        /dev/shm); SIGKILL to the whole group only if that did not work.
        """
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers, if any
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)
        # The output pipe ends with the last process that holds it.
        self._reader.join(10)
        if not self._reader.is_alive():
            self.proc.stdout.close()


@pytest.fixture
def start_job():
    """``start_job(*server_flags)`` starts a job; every job is ended at teardown.

    The jobs' output is printed at teardown: pytest shows it if a test fails.
    """
    jobs = []

    def start(*server_flags: str) -> Job:
        job = Job(*job_command(*server_flags))
        jobs.append(job)
        return job

    yield start
    errors = []
    for job in jobs:
        try:
            job.end()
        except Exception as e:  # still end the others
            errors.append(e)
        print(
            f"--- {' '.join(job.command)} (exit status {job.proc.returncode}):\n"
            + job.output()
        )
    if errors:
        raise errors[0]


@pytest.fixture
def job(start_job) -> Job:
    return start_job()


def broadcast_progress(ccs: converse_ccs.CcsClient) -> tuple:
    ccs.send_broadcast("progress")
    return decode(ccs.recv_response())


def wait_counted(ccs: converse_ccs.CcsClient) -> None:
    """Poll the summed progress until the job has checked all of 2..N."""
    deadline = time.monotonic() + COUNT_TIMEOUT
    last = (0, 0)
    while True:
        now = broadcast_progress(ccs)
        assert now[0] >= last[0] and now[1] >= last[1], f"progress went back: {last} -> {now}"
        assert now[0] <= TOTAL[0] and now[1] <= TOTAL[1], f"progress {now} beyond the total {TOTAL}"
        if now == TOTAL:
            return
        assert time.monotonic() < deadline, f"not done counting after {COUNT_TIMEOUT} s: {now} of {TOTAL}"
        last = now
        time.sleep(0.05)


def stop(job: Job, **client_kwargs) -> None:
    """Send `stop`: the job replies "stopping" and exits with status 0."""
    with job.client(**client_kwargs) as ccs:
        assert ccs.call("stop", 0) == b"stopping"
    assert job.wait_exit() == 0, job.output()


# ---------------------------------------------------------------------------
# The console script
# ---------------------------------------------------------------------------


def cli_command() -> tuple:
    """How to run the command-line tool, and its environment.

    The installed ``converse-ccs`` script when the module under test is the
    installed one (and the script sits beside this interpreter, as in a venv);
    otherwise ``python -m converse_ccs`` on the module under test.
    """
    script = os.path.join(sysconfig.get_path("scripts"), "converse-ccs")
    module_dir = os.path.dirname(os.path.abspath(converse_ccs.__file__))
    env = dict(os.environ)
    if module_dir != HERE and os.path.isfile(script) and os.access(script, os.X_OK):
        return [script], env
    env["PYTHONPATH"] = module_dir + os.pathsep + env.get("PYTHONPATH", "")
    return [sys.executable, "-m", "converse_ccs"], env


def run_cli(*args: str) -> subprocess.CompletedProcess:
    command, env = cli_command()
    return subprocess.run(
        [*command, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=CLI_TIMEOUT,
    )


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


def test_layout_and_progress_on_every_pe(job):
    with job.client() as ccs:
        assert ccs.num_pes() == PES
        assert [ccs.node_size(i) for i in range(ccs.num_nodes())] == job.node_sizes
        firsts = [sum(job.node_sizes[:i]) for i in range(len(job.node_sizes))]
        assert [ccs.node_first(i) for i in range(ccs.num_nodes())] == firsts
        wait_counted(ccs)
        per_pe = [decode(ccs.call("progress", pe)) for pe in range(PES)]
        assert per_pe == EXPECTED
        # The broadcast is the sum of the PEs' replies (the merge function).
        assert broadcast_progress(ccs) == TOTAL


def test_multicast_sums_the_listed_pes(job):
    with job.client() as ccs:
        wait_counted(ccs)
        for pes in ([1, 3], [0, 2], [3, 1, 2], [0, 1, 2, 3]):
            ccs.send_multicast("progress", pes)
            got = decode(ccs.recv_response())
            want = tuple(sum(EXPECTED[pe][i] for pe in pes) for i in range(2))
            assert got == want, f"multicast to {pes}"
        # A one-PE list is a plain request to that PE.
        ccs.send_multicast("progress", [2])
        assert decode(ccs.recv_response()) == EXPECTED[2]


def test_stop_ends_the_job(job):
    with job.client() as ccs:
        assert ccs.num_pes() == PES
    stop(job)
    # Nobody listens any more.
    with pytest.raises(OSError):
        job.client(timeout=5)


def test_authenticated_job(start_job, tmp_path):
    auth_file = tmp_path / "keys"
    auth_file.write_text("0 OTP\n")
    job = start_job("++server-auth", str(auth_file))
    key = job.wait_for(OTP_LINE, START_TIMEOUT).group(1)

    with job.client(key=key) as ccs:
        assert ccs.authenticated
        assert ccs.num_pes() == PES
        wait_counted(ccs)
        assert [decode(ccs.call("progress", pe)) for pe in range(PES)] == EXPECTED
        ccs.send_multicast("progress", [1, 3])
        assert decode(ccs.recv_response()) == tuple(map(sum, zip(EXPECTED[1], EXPECTED[3])))

    # Without the key: refused (the server closes the connection unanswered).
    with pytest.raises(converse_ccs.CcsNoReply):
        job.client()
    job.wait_for(re.compile(r"unauthenticated request from .* refused"), CCS_TIMEOUT)
    # With a wrong key: the handshake fails.
    wrong = "%032X" % (int(key, 16) ^ 1)
    with pytest.raises(converse_ccs.CcsAuthError):
        job.client(key=wrong)

    # The command-line tool, with and without the key.
    key_file = tmp_path / "otp.key"
    key_file.write_text(key + "\n")
    result = run_cli(f"127.0.0.1:{job.port}", "progress", "--all", "--auth", str(key_file))
    assert result.returncode == 0, result.stderr
    assert decode(result.stdout) == TOTAL
    result = run_cli(f"127.0.0.1:{job.port}", "progress", "--pe", "0", "--timeout", str(CCS_TIMEOUT))
    assert result.returncode == converse_ccs.EXIT_NO_REPLY, result.stderr
    assert result.stdout == b""

    stop(job, key=key)


def test_console_script(job):
    server = f"127.0.0.1:{job.port}"
    with job.client() as ccs:
        wait_counted(ccs)
    result = run_cli(server, "progress", "--all", "--timeout", str(CCS_TIMEOUT))
    assert result.returncode == 0, result.stderr
    assert decode(result.stdout) == TOTAL
    result = run_cli(server, "progress", "--pes", "1,3", "--timeout", str(CCS_TIMEOUT))
    assert result.returncode == 0, result.stderr
    assert decode(result.stdout) == tuple(map(sum, zip(EXPECTED[1], EXPECTED[3])))
    result = run_cli(server, "progress", "--pe", "3", "--timeout", str(CCS_TIMEOUT))
    assert result.returncode == 0, result.stderr
    assert decode(result.stdout) == EXPECTED[3]
    result = run_cli(server, "stop", "--timeout", str(CCS_TIMEOUT))
    assert (result.returncode, result.stdout) == (0, b"stopping"), result.stderr
    assert job.wait_exit() == 0, job.output()
    # The job is gone: connecting fails (exit status 1).
    result = run_cli(server, "progress", "--timeout", "5")
    assert result.returncode == converse_ccs.EXIT_ERROR, result.stderr


def test_console_script_version_and_help():
    # Needs no job.
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == f"converse-ccs {converse_ccs.__version__}"
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    assert b"HOST:PORT" in result.stdout and b"--timeout" in result.stdout
    # Installed: the package metadata has the module's version.
    if os.path.dirname(os.path.abspath(converse_ccs.__file__)) != HERE:
        from importlib.metadata import version

        assert version("converse-ccs") == converse_ccs.__version__
