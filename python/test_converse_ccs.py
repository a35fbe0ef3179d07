"""Tests for converse_ccs against a fake CCS server.

Run with:  cd python && python3 -m unittest -v

The fake server is written from ccs-protocol.md, independently of the client
(it computes its own SHA-1 blocks and parses bytes itself).  It records every
byte it reads, so the tests compare the wire format exactly, and it notes any
protocol violation it spots; every test ends by checking there were none.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import converse_ccs as ccs

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE_PATH = os.path.join(HERE, "converse_ccs.py")

KEY = bytes.fromhex("00112233445566778899aabbccddeeff")
OTHER_KEY = bytes.fromhex("ffeeddccbbaa99887766554433221100")
# Upper bound for anything that should happen "at once"; only ever reached if
# a test is broken, never asserted on.
SAFETY_TIMEOUT = 5.0


def sha1_52(key: bytes, salt: int, header16: bytes = bytes(16)) -> bytes:
    """The protocol's hash, computed here independently of the client."""
    block = key + salt.to_bytes(4, "big") + header16 + bytes(16)
    assert len(block) == 52
    return hashlib.sha1(block).digest()


def plain_header(length: int, dest: int, name: bytes) -> bytes:
    """Expected 40-byte header, spelled out field by field."""
    return length.to_bytes(4, "big") + dest.to_bytes(4, "big", signed=True) + name + bytes(32 - len(name))


# ---------------------------------------------------------------------------
# Fake server
# ---------------------------------------------------------------------------

NO_REPLY = object()  # handler result: close the connection without replying


@dataclass
class Reply:
    data: bytes = b""
    bad_hash: bool = False  # corrupt the authenticated reply's hash prefix


@dataclass
class Received:
    """One request as the server saw it."""

    raw: bytes  # every byte read on the connection
    authenticated: bool
    dest: int
    name: str
    pes: List[int]
    data: bytes
    client_id: Optional[int] = None
    reply_salt: Optional[int] = None
    client_salt: Optional[int] = None  # the stored salt the hash was checked against


class _Closed(Exception):
    """The client closed the connection."""


class _RecordingReader:
    def __init__(self, conn: socket.socket):
        self.conn = conn
        self.raw = bytearray()

    def exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.conn.recv(n - len(out))
            if not chunk:
                raise _Closed()
            out += chunk
        self.raw += out
        return bytes(out)


class FakeCcsServer:
    def __init__(
        self,
        node_sizes=(2, 2),
        keys: Optional[Dict[int, bytes]] = None,
        first_client_salt: int = 7,
        getinfo_reply: Optional[bytes] = None,
        answer_with_wrong_key: bool = False,
    ):
        self.node_sizes = tuple(node_sizes)
        self.keys = dict(keys or {})
        self.first_client_salt = first_client_salt
        self.getinfo_reply = getinfo_reply
        self.answer_with_wrong_key = answer_with_wrong_key
        self.handlers: Dict[str, Callable[[Received], object]] = {
            "ccs_getinfo": self._getinfo,
            "echo": lambda req: req.data,
            "empty": lambda req: None,
            "silent": lambda req: NO_REPLY,
            "gated": self._gated,
            "forged": lambda req: Reply(b"forged", bad_hash=True),
        }
        self.gate = threading.Event()  # releases the "gated" handler
        self.requests: List[Received] = []
        self.handshakes: List[dict] = []
        self.refused: List[str] = []
        self.violations: List[str] = []
        self._clients: Dict[int, list] = {}  # id -> [level, salt]
        self._next_client_id = 1000
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        # Polling accept: closing a socket does not wake a blocked accept()
        # on every platform.
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    # -- lifetime --

    def stop(self) -> None:
        self._stop.set()
        self.gate.set()
        self._acceptor.join(SAFETY_TIMEOUT)
        for t in list(self._threads):
            t.join(SAFETY_TIMEOUT)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(SAFETY_TIMEOUT)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    # -- built-in handlers --

    def _getinfo(self, req: Received):
        if req.data or req.dest != 0:
            self.violations.append(f"ccs_getinfo sent with data {req.data!r} to {req.dest}")
        if self.getinfo_reply is not None:
            return self.getinfo_reply
        sizes = self.node_sizes
        return struct.pack(f">i{len(sizes)}i", len(sizes), *sizes)

    def _gated(self, req: Received):
        self.gate.wait(SAFETY_TIMEOUT)
        return b"late"

    # -- connection handling --

    def _serve(self, conn: socket.socket) -> None:
        reader = _RecordingReader(conn)
        try:
            first = reader.exact(4)
            if first[0] < 0x20:
                self._serve_plain(conn, reader, first)
            elif first[:3] == b"\x80\x00\x01":
                self._serve_new_client(conn, reader, first[3])
            elif first[:3] == b"\x80\x00\x00":
                self._serve_auth_request(conn, reader, first[3])
            else:
                self.violations.append(f"unknown connection kind {first!r}")
        except _Closed:
            pass  # the client went away (e.g. abandoned its request)
        except socket.timeout:
            self.violations.append(f"client stalled after sending {bytes(reader.raw)!r}")
        except OSError:
            pass  # writing to a client that already gave up
        finally:
            conn.close()

    def _parse_header(self, header: bytes):
        length, dest = struct.unpack(">Ii", header[:8])
        field_ = header[8:40]
        if b"\0" not in field_:
            self.violations.append(f"handler name not NUL-terminated: {field_!r}")
            return length, dest, field_.decode("latin-1")
        name, padding = field_.split(b"\0", 1)
        if padding.strip(b"\0"):
            self.violations.append(f"handler name not NUL-padded: {field_!r}")
        return length, dest, name.decode("utf-8")

    def _read_body(self, reader: _RecordingReader, dest: int, length: int):
        pes = []
        if dest <= -2:
            pes = list(struct.unpack(f">{-dest}i", reader.exact(-dest * 4)))
        data = reader.exact(length)
        return pes, data

    def _run_handler(self, req: Received):
        with self._lock:
            self.requests.append(req)
        handler = self.handlers.get(req.name)
        if handler is None:
            return Reply(b"")  # unknown handler: diagnostic + empty reply
        result = handler(req)
        if result is NO_REPLY:
            return NO_REPLY
        if isinstance(result, Reply):
            return result
        return Reply(result or b"")

    def _serve_plain(self, conn, reader, first: bytes) -> None:
        header = first + reader.exact(36)
        length, dest, name = self._parse_header(header)
        if 0 in self.keys:
            # Unauthenticated requests only when level 0 has no key: close
            # without reading the rest.
            self.refused.append("unauthenticated request")
            return
        pes, data = self._read_body(reader, dest, length)
        reply = self._run_handler(Received(bytes(reader.raw), False, dest, name, pes, data))
        if reply is not NO_REPLY:
            # Written in pieces; the client must reassemble.
            conn.sendall(struct.pack(">I", len(reply.data)))
            conn.sendall(reply.data)

    def _serve_new_client(self, conn, reader, level: int) -> None:
        s1 = struct.unpack(">I", reader.exact(4))[0]
        key = self.keys.get(level)
        record = {"level": level, "s1": s1}
        self.handshakes.append(record)
        if key is None:
            self.refused.append(f"no key for level {level}")
            return
        s2 = secrets.randbits(32)
        record["s2"] = s2
        conn.sendall(struct.pack(">I", s2))
        proof = reader.exact(20)
        record["raw"] = bytes(reader.raw)
        if proof != sha1_52(key, s2):
            self.refused.append("bad key hash")
            return
        with self._lock:
            client_id = self._next_client_id
            self._next_client_id += 1
            self._clients[client_id] = [level, self.first_client_salt]
        record["client_id"] = client_id
        answer_key = OTHER_KEY if self.answer_with_wrong_key else key
        conn.sendall(sha1_52(answer_key, s1) + struct.pack(">II", client_id, self.first_client_salt))

    def _serve_auth_request(self, conn, reader, level: int) -> None:
        client_id, reply_salt = struct.unpack(">II", reader.exact(8))
        request_hash = reader.exact(20)
        header = reader.exact(40)
        length, dest, name = self._parse_header(header)
        with self._lock:
            client = self._clients.get(client_id)
            if client is None or client[0] != level:
                self.refused.append(f"unknown client {client_id} at level {level}")
                return
            key = self.keys[level]
            used_salt = client[1]
            if request_hash != sha1_52(key, used_salt, header[:16]):
                self.refused.append("bad request hash")
                return
            client[1] = (used_salt + 1) & 0xFFFFFFFF
        pes, data = self._read_body(reader, dest, length)
        req = Received(bytes(reader.raw), True, dest, name, pes, data, client_id, reply_salt, used_salt)
        reply = self._run_handler(req)
        if reply is not NO_REPLY:
            proof = sha1_52(key, reply_salt)
            if reply.bad_hash:
                proof = bytes([proof[0] ^ 1]) + proof[1:]
            conn.sendall(proof)
            conn.sendall(struct.pack(">I", len(reply.data)) + reply.data)


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


class ServerTestCase(unittest.TestCase):
    server_options: dict = {}

    def setUp(self):
        self.server = FakeCcsServer(**self.server_options)
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        self.server.stop()
        self.assertEqual(self.server.violations, [])

    def connect(self, **kwargs) -> ccs.CcsClient:
        kwargs.setdefault("timeout", SAFETY_TIMEOUT)
        client = ccs.CcsClient("127.0.0.1", self.server.port, **kwargs)
        self.clients.append(client)
        return client

    def last_request(self) -> Received:
        return self.server.requests[-1]

    def wait_for_probe(self, client: ccs.CcsClient) -> bool:
        deadline = time.monotonic() + SAFETY_TIMEOUT
        while time.monotonic() < deadline:
            if client.probe():
                return True
            time.sleep(0.01)
        return False


class LayoutTests(ServerTestCase):
    server_options = {"node_sizes": (2, 3, 1)}

    def test_getinfo_layout(self):
        client = self.connect()
        self.assertEqual(client.num_nodes(), 3)
        self.assertEqual(client.num_pes(), 6)
        self.assertEqual([client.node_first(n) for n in range(3)], [0, 2, 5])
        self.assertEqual([client.node_size(n) for n in range(3)], [2, 3, 1])
        with self.assertRaises(IndexError):
            client.node_size(3)
        with self.assertRaises(IndexError):
            client.node_first(-1)

    def test_getinfo_request_bytes(self):
        self.connect()
        self.assertEqual(len(self.server.requests), 1)
        expected = b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00" + b"ccs_getinfo" + bytes(21)
        self.assertEqual(self.last_request().raw, expected)


class MalformedLayoutTests(ServerTestCase):
    server_options = {"getinfo_reply": struct.pack(">ii", 5, 1)}  # 5 nodes, 1 size

    def test_short_getinfo_reply_is_an_error(self):
        with self.assertRaises(ccs.CcsError):
            self.connect()


class RequestTests(ServerTestCase):
    def test_single_pe_request(self):
        client = self.connect()
        client.send_request("echo", 3, b"hello")
        self.assertTrue(client.pending)
        self.assertEqual(client.recv_response(), b"hello")
        self.assertFalse(client.pending)
        expected = b"\x00\x00\x00\x05" + b"\x00\x00\x00\x03" + b"echo" + bytes(28) + b"hello"
        self.assertEqual(self.last_request().raw, expected)

    def test_broadcast(self):
        client = self.connect()
        client.send_broadcast("echo", b"all")
        self.assertEqual(client.recv_response(), b"all")
        req = self.last_request()
        self.assertEqual(req.raw[4:8], b"\xff\xff\xff\xff")
        self.assertEqual(req.raw, plain_header(3, -1, b"echo") + b"all")

    def test_multicast(self):
        client = self.connect()
        client.send_multicast("echo", [0, 2, 3], b"some")
        self.assertEqual(client.recv_response(), b"some")
        req = self.last_request()
        self.assertEqual((req.dest, req.pes, req.data), (-3, [0, 2, 3], b"some"))
        # Data length excludes the PE list, which follows the 40-byte header.
        expected = (
            b"\x00\x00\x00\x04" + b"\xff\xff\xff\xfd" + b"echo" + bytes(28)
            + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x03"
            + b"some"
        )
        self.assertEqual(req.raw, expected)

    def test_multicast_to_one_pe_is_a_plain_request(self):
        client = self.connect()
        client.send_multicast("echo", [2], b"x")
        self.assertEqual(client.recv_response(), b"x")
        self.assertEqual(self.last_request().raw, plain_header(1, 2, b"echo") + b"x")

    def test_multicast_argument_checks(self):
        client = self.connect()
        with self.assertRaises(ValueError):
            client.send_multicast("echo", [])
        with self.assertRaises(ValueError):
            client.send_multicast("echo", [0, -1])
        with self.assertRaises(ValueError):
            client.send_request("echo", -1)

    def test_empty_reply(self):
        client = self.connect()
        client.send_request("empty", 0, b"ignored")
        self.assertEqual(client.recv_response(), b"")

    def test_unknown_handler_gets_empty_reply(self):
        client = self.connect()
        self.assertEqual(client.call("no_such_handler", 1), b"")

    def test_no_reply_raises_ccs_no_reply(self):
        client = self.connect()
        client.send_request("silent", 0)
        with self.assertRaises(ccs.CcsNoReply) as cm:
            client.recv_response()
        self.assertIsInstance(cm.exception, ccs.CcsError)
        self.assertIsInstance(cm.exception, ConnectionError)
        self.assertFalse(client.pending)

    def test_timeout_keeps_request_outstanding(self):
        client = self.connect()
        client.send_request("gated", 0)
        with self.assertRaises(TimeoutError):
            client.recv_response(timeout=0.1)
        self.assertTrue(client.pending)
        self.server.gate.set()
        self.assertEqual(client.recv_response(), b"late")

    def test_default_timeout_comes_from_constructor(self):
        client = self.connect(timeout=0.2)
        client.send_request("gated", 0)
        with self.assertRaises(TimeoutError):
            client.recv_response()

    def test_probe(self):
        client = self.connect()
        self.assertFalse(client.probe())  # nothing outstanding
        client.send_request("gated", 0)
        self.assertFalse(client.probe())  # the server cannot have replied yet
        self.server.gate.set()
        self.assertTrue(self.wait_for_probe(client))
        self.assertEqual(client.recv_response(timeout=0), b"late")

    def test_probe_reports_closed_connection(self):
        client = self.connect()
        client.send_request("silent", 0)
        self.assertTrue(self.wait_for_probe(client))
        with self.assertRaises(ccs.CcsNoReply):
            client.recv_response()

    def test_handler_name_limits(self):
        client = self.connect()
        count = len(self.server.requests)
        for bad in ("x" * 32, "", "a\0b", b"y" * 40):
            with self.assertRaises(ValueError, msg=repr(bad)):
                client.send_request(bad, 0)
        self.assertEqual(len(self.server.requests), count)  # nothing was sent
        self.assertEqual(client.call("z" * 31, 0), b"")  # the longest legal name
        self.assertEqual(self.last_request().raw, plain_header(0, 0, b"z" * 31))

    def test_large_request_and_reply(self):
        client = self.connect()
        payload = os.urandom(3 << 20)
        self.assertEqual(client.call("echo", 1, payload), payload)

    def test_new_request_abandons_outstanding_one(self):
        client = self.connect()
        client.send_request("gated", 0)
        client.send_request("echo", 0, b"second")
        self.assertEqual(client.recv_response(), b"second")

    def test_usage_errors(self):
        client = self.connect()
        with self.assertRaises(RuntimeError):
            client.recv_response()
        with self.assertRaises(TypeError):
            client.send_request("echo", 0, "text")
        client.close()
        with self.assertRaises(ValueError):
            client.send_request("echo", 0)

    def test_level_without_key_is_rejected(self):
        with self.assertRaises(ValueError):
            self.connect(level=1)

    def test_context_manager_closes(self):
        with ccs.CcsClient("127.0.0.1", self.server.port, timeout=SAFETY_TIMEOUT) as client:
            client.send_request("gated", 0)
        self.assertFalse(client.pending)


class HashTests(unittest.TestCase):
    def test_hash_52_layout(self):
        header = bytes(range(16))
        self.assertEqual(ccs.hash_52(KEY, 0x01020304, header), sha1_52(KEY, 0x01020304, header))
        self.assertEqual(
            ccs.hash_52(KEY, 5),
            hashlib.sha1(KEY + b"\x00\x00\x00\x05" + bytes(32)).digest(),
        )
        # C clients keep salts in an int: -1 is the same bits as 0xFFFFFFFF.
        self.assertEqual(ccs.hash_52(KEY, -1), ccs.hash_52(KEY, 0xFFFFFFFF))
        self.assertEqual(ccs.hash_52(KEY.hex().upper(), 9), ccs.hash_52(KEY, 9))
        with self.assertRaises(ValueError):
            ccs.hash_52(KEY, 1, b"short")
        with self.assertRaises(ValueError):
            ccs.hash_52(KEY, 1 << 32)

    def test_parse_key(self):
        self.assertEqual(ccs.parse_key("00112233445566778899AABBCCDDEEFF"), KEY)
        self.assertEqual(ccs.parse_key(KEY), KEY)
        for bad in ("0011", "zz" * 16, b"\x00" * 15):
            with self.assertRaises(ValueError):
                ccs.parse_key(bad)


class AuthTests(ServerTestCase):
    # Salts start just below the 32-bit wrap to check the increment wraps.
    server_options = {"keys": {0: OTHER_KEY, 2: KEY}, "first_client_salt": 0xFFFFFFFE}

    def test_auth_success_and_request_layout(self):
        client = self.connect(key=KEY.hex(), level=2)
        self.assertTrue(client.authenticated)
        self.assertEqual(client.num_pes(), 4)

        # Handshake: 80 00 01 LL, s1, then hash(key, s2).
        (hs,) = self.server.handshakes
        self.assertEqual(hs["level"], 2)
        self.assertEqual(hs["raw"][:4], b"\x80\x00\x01\x02")
        self.assertEqual(hs["raw"][8:], sha1_52(KEY, hs["s2"]))

        client.send_request("echo", 1, b"abc")
        self.assertEqual(client.recv_response(), b"abc")
        client.send_multicast("echo", [1, 3], b"de")
        self.assertEqual(client.recv_response(), b"de")

        getinfo, single, multi = self.server.requests
        self.assertTrue(all(r.authenticated for r in self.server.requests))
        self.assertEqual({r.client_id for r in self.server.requests}, {hs["client_id"]})
        # The stored salt went up by one per request, wrapping at 2**32.
        self.assertEqual([r.client_salt for r in self.server.requests], [0xFFFFFFFE, 0xFFFFFFFF, 0])

        for req, header, rest in (
            (single, plain_header(3, 1, b"echo"), b"abc"),
            (multi, plain_header(2, -2, b"echo"), b"\x00\x00\x00\x01\x00\x00\x00\x03de"),
        ):
            raw = req.raw
            self.assertEqual(raw[:4], b"\x80\x00\x00\x02")
            self.assertEqual(raw[4:8], hs["client_id"].to_bytes(4, "big"))
            self.assertEqual(raw[8:12], req.reply_salt.to_bytes(4, "big"))
            self.assertEqual(raw[12:32], sha1_52(KEY, req.client_salt, header[:16]))
            self.assertEqual(raw[32:72], header)
            self.assertEqual(raw[72:], rest)

    def test_unauthenticated_request_refused(self):
        with self.assertRaises(ccs.CcsNoReply):
            self.connect()
        self.assertIn("unauthenticated request", self.server.refused)

    def test_wrong_key_refused(self):
        with self.assertRaises(ccs.CcsAuthError):
            self.connect(key=OTHER_KEY, level=2)
        self.assertEqual(self.server.refused, ["bad key hash"])
        self.assertEqual(self.server.requests, [])

    def test_level_without_server_key_refused(self):
        with self.assertRaises(ccs.CcsAuthError):
            self.connect(key=KEY, level=7)
        self.assertEqual(self.server.refused, ["no key for level 7"])

    def test_reply_hash_mismatch_detected(self):
        client = self.connect(key=KEY, level=2)
        client.send_request("forged", 0)
        with self.assertRaises(ccs.CcsAuthError):
            client.recv_response()
        self.assertFalse(client.pending)
        # The client stays usable: salts are still in step with the server.
        self.assertEqual(client.call("echo", 0, b"ok"), b"ok")

    def test_auth_no_reply(self):
        client = self.connect(key=KEY, level=2)
        client.send_request("silent", 0)
        with self.assertRaises(ccs.CcsNoReply):
            client.recv_response()


class ImpostorServerTests(ServerTestCase):
    server_options = {"keys": {0: KEY}, "answer_with_wrong_key": True}

    def test_server_that_does_not_know_the_key(self):
        with self.assertRaises(ccs.CcsAuthError):
            self.connect(key=KEY)
        self.assertEqual(self.server.requests, [])


class CliMixin:
    """Runs the module as a script against the test's fake server."""

    def run_cli(self, *args, stdin: bytes = b""):
        return subprocess.run(
            [sys.executable, MODULE_PATH, f"127.0.0.1:{self.server.port}", *args],
            input=stdin,
            capture_output=True,
            timeout=30,
        )


class CliTests(CliMixin, ServerTestCase):

    def test_data_from_stdin_is_binary_safe(self):
        payload = b"\x00\xffbinary\r\n\x80 data\n"
        result = self.run_cli("echo", "--pe", "1", "--data", "-", stdin=payload)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, payload)
        self.assertEqual(self.last_request().raw, plain_header(len(payload), 1, b"echo") + payload)

    def test_text_data_and_default_pe(self):
        result = self.run_cli("echo", "--data", "héllo")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "héllo".encode())
        self.assertEqual(self.last_request().dest, 0)

    def test_data_from_file_and_multicast(self):
        with tempfile.NamedTemporaryFile(delete=False) as f:
            f.write(b"file\x00contents")
        try:
            result = self.run_cli("echo", "--pes", "0,2-3", "--data", "@" + f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, b"file\x00contents")
        req = self.last_request()
        self.assertEqual((req.dest, req.pes), (-3, [0, 2, 3]))

    def test_broadcast(self):
        result = self.run_cli("echo", "--all", "--data", "b")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.last_request().dest, -1)

    def test_no_reply_exit_status(self):
        result = self.run_cli("silent")
        self.assertEqual(result.returncode, ccs.EXIT_NO_REPLY)
        self.assertEqual(result.stdout, b"")

    def test_bad_handler_name(self):
        result = self.run_cli("n" * 32)
        self.assertEqual(result.returncode, 2)
        self.assertIn(b"shorter than 32", result.stderr)


class AuthCliTests(CliMixin, ServerTestCase):
    server_options = {"keys": {1: KEY}}

    def write_key_file(self, text: str) -> str:
        fd, path = tempfile.mkstemp()
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.unlink, path)
        return path

    def test_auth_key_file(self):
        path = self.write_key_file(KEY.hex().upper() + "\n")
        result = self.run_cli("echo", "--auth", path, "--level", "1", "--data", "-", stdin=b"secret")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, b"secret")
        self.assertTrue(self.last_request().authenticated)

    def test_server_style_auth_file(self):
        path = self.write_key_file(f"# levels\n0 OTP\n1 {KEY.hex()}\n")
        result = self.run_cli("echo", "--auth", path, "--level", "1", "--data", "x")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, b"x")

    def test_wrong_key_exit_status(self):
        path = self.write_key_file(OTHER_KEY.hex())
        result = self.run_cli("echo", "--auth", path, "--level", "1")
        self.assertEqual(result.returncode, ccs.EXIT_ERROR)
        self.assertIn(b"refused the key", result.stderr)


if __name__ == "__main__":
    unittest.main()
