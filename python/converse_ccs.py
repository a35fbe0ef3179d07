#!/usr/bin/env python3
"""Client for the Converse Client-Server (CCS) protocol, standard library only.

A running Converse (converse-rs or Charm++) job started with ``++server``
listens on a TCP port for CCS requests.  A request names a handler that the
job registered with ``CcsRegisterHandler`` and a destination (one PE, every
PE, or a list of PEs); the handler's reply comes back on the same connection.
This module speaks that protocol byte for byte (see ``ccs-protocol.md``):

* every request opens its own TCP connection, which stays open until the
  reply has been read;
* all integers are 4-byte big-endian;
* with a key (``++server-auth``) requests are authenticated with salted
  SHA-1 hashes, and replies are checked the same way.

The class :class:`CcsClient` mirrors Charm++'s C client (``ccs-client.h``);
each method's docstring names the C function it corresponds to.

Example::

    from converse_ccs import CcsClient

    with CcsClient("127.0.0.1", 1234, timeout=10) as ccs:
        print(ccs.num_nodes(), "nodes,", ccs.num_pes(), "PEs")
        ccs.send_request("echo", pe=1, data=b"hello")
        print(ccs.recv_response())            # the handler's reply, as bytes
        ccs.send_multicast("sum", [0, 2, 3], data=b"...")
        print(ccs.recv_response())            # the merged reply

    # Authenticated (the server was started with ++server-auth FILE):
    ccs = CcsClient("node0", 1234, key="00112233445566778899AABBCCDDEEFF")

From the command line (the reply bytes go to stdout)::

    python3 converse_ccs.py 127.0.0.1:1234 echo --pe 1 --data hello
    printf 'raw bytes' | python3 converse_ccs.py host:1234 echo --data -
    python3 converse_ccs.py host:1234 sum --pes 0,2-3 --data @request.bin
    python3 converse_ccs.py host:1234 stats --all --auth key.txt --level 1

Errors: :class:`CcsNoReply` when the server closes the connection without
replying (the protocol's "no reply"), :class:`CcsAuthError` when
authentication fails, :class:`CcsError` for other protocol failures, and the
built-in :class:`TimeoutError` when a wait runs out.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import math
import secrets
import select
import socket
import struct
import sys
import time
from typing import Iterable, Optional, Sequence, Union

# The package version (pyproject.toml reads it from here).
__version__ = "0.1.0"

__all__ = [
    "CcsClient",
    "CcsError",
    "CcsNoReply",
    "CcsAuthError",
    "hash_52",
    "parse_key",
    "read_key_file",
    "main",
]

# ---------------------------------------------------------------------------
# Wire constants (ccs-protocol.md)
# ---------------------------------------------------------------------------

HEADER_SIZE = 40  # data length (4) + destination (4) + handler name (32)
NAME_SIZE = 32  # handler name field, NUL-padded
HASH_SIZE = 20  # SHA-1 digest
KEY_SIZE = 16  # one key per security level
SALT_SIZE = 4
# The server recognises an unauthenticated header by a first byte below 0x20,
# so the data length (the first header field) must stay below 2**29.
MAX_DATA_LEN = 1 << 29
# First bytes of the authenticated protocol: 0x80 = SHA-1 auth, 0x00 = version.
_AUTH_MAGIC = b"\x80\x00"
_AUTH_KIND_REQUEST = 0x00
_AUTH_KIND_NEW_CLIENT = 0x01
_U32_MASK = 0xFFFFFFFF
_INT32_MAX = 0x7FFFFFFF

BytesLike = Union[bytes, bytearray, memoryview]


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class CcsError(ConnectionError):
    """A CCS protocol failure (malformed or truncated reply, closed stream)."""


class CcsNoReply(CcsError):
    """The server closed the request's connection without sending a reply.

    This is the protocol's "no reply" outcome (for instance a handler that
    neither replied nor returned normally, or a request the server refused),
    as opposed to an *empty* reply, which :meth:`CcsClient.recv_response`
    returns as ``b""``.
    """


class CcsAuthError(CcsError):
    """Authentication failed: the key was refused or a hash did not match."""


# ---------------------------------------------------------------------------
# Authentication helpers
# ---------------------------------------------------------------------------


def parse_key(key: Union[str, BytesLike]) -> bytes:
    """Return a 16-byte CCS key given as raw bytes or as 32 hex digits.

    Hex digits are read as ordinary hexadecimal (case-insensitive); see
    README.md about Charm++'s own auth-file parser, which differs.
    """
    if isinstance(key, str):
        text = key.strip()
        if len(text) != 2 * KEY_SIZE:
            raise ValueError(f"a CCS key is {2 * KEY_SIZE} hex digits, got {len(text)} characters")
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise ValueError("a CCS key must consist of hex digits only") from None
    if isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
        if len(raw) != KEY_SIZE:
            raise ValueError(f"a CCS key is {KEY_SIZE} bytes, got {len(raw)}")
        return raw
    raise TypeError(f"a CCS key is bytes or a hex string, not {type(key).__name__}")


def hash_52(key: Union[str, BytesLike], salt: int, header16: Optional[BytesLike] = None) -> bytes:
    """SHA-1 over the 52-byte block used everywhere in CCS authentication.

    The block is ``key (16) || salt (4, big-endian) || header16 || 16 zero
    bytes``, where ``header16`` is the first 16 bytes of the 40-byte request
    header, or 16 zero bytes where no header is hashed (handshake, replies).
    Mirrors Charm++'s ``CCS_AUTH_hash``.

    ``salt`` is an unsigned or signed 32-bit integer (C clients keep salts in
    an ``int``); it is hashed as its 32-bit two's-complement pattern.
    """
    if not isinstance(salt, int) or not -(1 << 31) <= salt <= _U32_MASK:
        raise ValueError(f"salt must be a 32-bit integer, got {salt!r}")
    if header16 is None:
        header16 = bytes(16)
    elif len(header16) != 16:
        raise ValueError(f"header16 must be 16 bytes, got {len(header16)}")
    block = parse_key(key) + struct.pack(">I", salt & _U32_MASK) + bytes(header16) + bytes(16)
    assert len(block) == 52
    return hashlib.sha1(block).digest()


def read_key_file(path: str, level: int = 0) -> bytes:
    """Read a key for ``level`` from a key file.

    The file holds either just the 32 hex digit key, or lines in the
    server's ``++server-auth`` format, ``<level> <key>`` (``#`` starts a
    comment), from which the line for ``level`` is taken.
    """
    with open(path, "r", encoding="ascii") as f:
        text = f.read()
    lines = [line.split("#", 1)[0].split() for line in text.splitlines()]
    lines = [words for words in lines if words]
    if len(lines) == 1 and len(lines[0]) == 1:
        return parse_key(lines[0][0])
    for words in lines:
        if len(words) != 2:
            raise ValueError(f"{path}: expected a bare key or lines '<level> <key>'")
        if int(words[0]) == level:
            if words[1].upper() == "OTP":
                raise ValueError(
                    f"{path}: level {level} uses a one-time key; use the key the server printed"
                )
            return parse_key(words[1])
    raise ValueError(f"{path}: no key for security level {level}")


# ---------------------------------------------------------------------------
# Request encoding
# ---------------------------------------------------------------------------


def _encode_handler_name(handler: Union[str, bytes]) -> bytes:
    """Validate a handler name and return its bytes (without padding)."""
    name = handler.encode("utf-8") if isinstance(handler, str) else bytes(handler)
    if not name:
        raise ValueError("the handler name is empty")
    if b"\0" in name:
        raise ValueError("the handler name contains a NUL byte")
    # The field is 32 bytes and the server reads a NUL-terminated string from
    # it, so the name itself must leave room for at least one NUL.
    if len(name) >= NAME_SIZE:
        raise ValueError(
            f"handler name {handler!r} is {len(name)} bytes; CCS names must be shorter than {NAME_SIZE}"
        )
    return name


def _build_header(name: bytes, destination: int, data_len: int) -> bytes:
    """The 40-byte request header: data length, destination, padded name."""
    # struct's "32s" NUL-pads the name to the full field width.
    return struct.pack(">Ii32s", data_len, destination, name)


def _as_bytes(data: BytesLike, what: str = "data") -> bytes:
    if isinstance(data, str):
        raise TypeError(f"{what} must be bytes-like; encode text first (e.g. text.encode())")
    return bytes(data)


def _check_pe(pe: int) -> int:
    if isinstance(pe, bool) or not isinstance(pe, int):
        raise TypeError(f"a PE number must be an int, not {type(pe).__name__}")
    if not 0 <= pe <= _INT32_MAX:
        raise ValueError(f"PE number {pe} out of range (must be >= 0)")
    return pe


# ---------------------------------------------------------------------------
# Socket helpers
# ---------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes; return fewer only if the peer closed."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


class _PendingReply:
    """The connection of the one outstanding request and what it has read.

    Bytes are accumulated here rather than read in one go so that a wait
    that times out (or a :meth:`CcsClient.probe`) loses nothing: a later
    :meth:`CcsClient.recv_response` continues where the previous one left off.
    """

    def __init__(self, sock: socket.socket, reply_salt: Optional[int]):
        self.sock = sock
        # Set for authenticated requests: the reply starts with hash(key, salt).
        self.reply_salt = reply_salt
        self.buf = bytearray()
        self.eof = False  # the server closed (or reset) the connection

    @property
    def prefix_size(self) -> int:
        return HASH_SIZE if self.reply_salt is not None else 0

    def total_size(self) -> Optional[int]:
        """Size of the whole reply once its length field has arrived."""
        start = self.prefix_size
        if len(self.buf) < start + 4:
            return None
        (length,) = struct.unpack_from(">I", self.buf, start)
        return start + 4 + length

    def complete(self) -> bool:
        total = self.total_size()
        return total is not None and len(self.buf) >= total

    def read_some(self) -> None:
        """One ``recv`` into the buffer (honouring the socket's timeout)."""
        try:
            chunk = self.sock.recv(1 << 16)
        except ConnectionResetError:
            # A server that refuses a request may close before reading all of
            # it, which resets the connection: to us, that is "closed".
            chunk = b""
        if chunk:
            self.buf += chunk
        else:
            self.eof = True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------


class CcsClient:
    """A connection to a CCS server (mirrors Charm++'s ``CcsServer``).

    Mirrors ``CcsConnect`` / ``CcsConnectWithSecurity``: if ``key`` is given
    (16 bytes or 32 hex digits) a client identity is first created with the
    authentication handshake at security ``level``, and every request is then
    authenticated.  The constructor then asks PE 0 for ``ccs_getinfo`` and
    records the machine layout (nodes and PEs per node).

    ``timeout`` (seconds, or None to wait indefinitely) bounds every socket
    operation: connecting, the handshake, sending a request, and is the
    default for :meth:`recv_response`.

    At most one request is outstanding at a time, as in the C client; the
    reply is read with :meth:`recv_response`.  Not thread-safe.
    """

    def __init__(
        self,
        host: str,
        port: int,
        key: Union[str, BytesLike, None] = None,
        level: int = 0,
        timeout: Optional[float] = None,
    ):
        if not isinstance(level, int) or not 0 <= level <= 255:
            raise ValueError(f"security level must be 0..255, got {level!r}")
        if key is None and level != 0:
            # Without a key the request is unauthenticated and carries no
            # level, so a level here is almost certainly a mistake.
            raise ValueError("a security level needs a key")
        self.host = host
        self.port = int(port)
        self.level = level
        self.timeout = timeout
        self._key: Optional[bytes] = None if key is None else parse_key(key)
        self._client_id: Optional[int] = None
        self._client_salt = 0
        self._pending: Optional[_PendingReply] = None
        self._closed = False
        self._node_sizes: tuple = ()
        self._node_firsts: tuple = ()
        try:
            if self._key is not None:
                self._create_identity()
            self._fetch_layout()
        except BaseException:
            self.close()
            raise

    # -- connection setup ---------------------------------------------------

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        # Requests are written in one piece and then we wait for the reply;
        # never hold back a small final segment.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _create_identity(self) -> None:
        """The handshake that gives this client an id and a salt."""
        assert self._key is not None
        s1 = secrets.randbits(32)
        with self._connect() as sock:
            sock.sendall(_AUTH_MAGIC + bytes([_AUTH_KIND_NEW_CLIENT, self.level]) + struct.pack(">I", s1))
            s2_raw = _recv_exact(sock, SALT_SIZE)
            if len(s2_raw) < SALT_SIZE:
                raise CcsAuthError(
                    f"the server refused authentication at level {self.level} (no key for that level?)"
                )
            (s2,) = struct.unpack(">I", s2_raw)
            # Prove we know the key: hash it with the server's salt.
            try:
                sock.sendall(hash_52(self._key, s2))
            except (BrokenPipeError, ConnectionResetError):
                pass  # reported below, as the missing answer
            answer = _recv_exact(sock, HASH_SIZE + 8)
            if len(answer) < HASH_SIZE + 8:
                raise CcsAuthError("the server refused the key (wrong key for this level?)")
            # And make the server prove it knows the key too, with our salt.
            if not hmac.compare_digest(answer[:HASH_SIZE], hash_52(self._key, s1)):
                raise CcsAuthError("the server's answer does not match the key; not the expected server")
            self._client_id, self._client_salt = struct.unpack_from(">II", answer, HASH_SIZE)

    def _fetch_layout(self) -> None:
        """Ask PE 0 for ``ccs_getinfo``: node count, then each node's PE count."""
        self.send_request("ccs_getinfo", 0)
        reply = self.recv_response()
        if len(reply) < 4 or len(reply) % 4:
            raise CcsError(f"malformed ccs_getinfo reply ({len(reply)} bytes)")
        words = struct.unpack(f">{len(reply) // 4}i", reply)
        count, sizes = words[0], words[1:]
        if count < 0 or len(sizes) < count or any(s < 0 for s in sizes[:count]):
            raise CcsError(f"malformed ccs_getinfo reply: {count} nodes, sizes {list(sizes)}")
        self._node_sizes = tuple(sizes[:count])
        firsts, total = [], 0
        for size in self._node_sizes:
            firsts.append(total)
            total += size
        self._node_firsts = tuple(firsts)

    # -- machine layout -----------------------------------------------------

    def num_nodes(self) -> int:
        """Number of nodes of the job (``CcsNumNodes``)."""
        return len(self._node_sizes)

    def num_pes(self) -> int:
        """Total number of PEs of the job (``CcsNumPes``)."""
        return sum(self._node_sizes)

    def node_first(self, node: int) -> int:
        """First PE of ``node`` (``CcsNodeFirst``)."""
        return self._node_firsts[self._check_node(node)]

    def node_size(self, node: int) -> int:
        """Number of PEs on ``node`` (``CcsNodeSize``)."""
        return self._node_sizes[self._check_node(node)]

    def _check_node(self, node: int) -> int:
        if not 0 <= node < len(self._node_sizes):
            raise IndexError(f"node {node} out of range (the job has {len(self._node_sizes)} nodes)")
        return node

    # -- requests -----------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        """True if requests are authenticated (a key was given)."""
        return self._key is not None

    @property
    def pending(self) -> bool:
        """True while a request's reply has not been received yet."""
        return self._pending is not None

    def send_request(self, handler: Union[str, bytes], pe: int, data: BytesLike = b"") -> None:
        """Run ``handler`` on PE ``pe`` with ``data`` (``CcsSendRequest``)."""
        self._send(handler, _check_pe(pe), (), data)

    def send_broadcast(self, handler: Union[str, bytes], data: BytesLike = b"") -> None:
        """Run ``handler`` on every PE (``CcsSendBroadcastRequest``).

        The handler must have a merge function on the server side
        (``CcsSetMergeFn``); the single reply is the merged one.
        """
        self._send(handler, -1, (), data)

    def send_multicast(self, handler: Union[str, bytes], pes: Iterable[int], data: BytesLike = b"") -> None:
        """Run ``handler`` on the listed PEs (``CcsSendMulticastRequest``).

        The replies are merged as for a broadcast.  A one-PE list is sent as
        a plain single-PE request, since a destination of -1 would mean
        "broadcast" on the wire.
        """
        pe_list = [_check_pe(pe) for pe in pes]
        if not pe_list:
            raise ValueError("a multicast needs at least one PE")
        if len(pe_list) == 1:
            self._send(handler, pe_list[0], (), data)
        else:
            self._send(handler, -len(pe_list), pe_list, data)

    def _send(self, handler: Union[str, bytes], destination: int, pes: Sequence[int], data: BytesLike) -> None:
        if self._closed:
            raise ValueError("the CCS client is closed")
        name = _encode_handler_name(handler)
        data = _as_bytes(data)
        if len(data) >= MAX_DATA_LEN:
            raise ValueError(f"request data of {len(data)} bytes exceeds the CCS limit of {MAX_DATA_LEN - 1}")
        # Like the C client, a new request replaces any outstanding one: its
        # reply is abandoned (closing the connection tells the server so).
        self._abandon_pending()

        header = _build_header(name, destination, len(data))
        pe_list = struct.pack(f">{len(pes)}i", *pes)
        sock = self._connect()
        try:
            reply_salt = None
            parts = []
            if self._key is not None:
                reply_salt = secrets.randbits(32)
                parts.append(_AUTH_MAGIC + bytes([_AUTH_KIND_REQUEST, self.level]))
                parts.append(struct.pack(">II", self._client_id, reply_salt))
                parts.append(hash_52(self._key, self._client_salt, header[:16]))
                # The server moves its copy of the salt on after checking
                # this request; ours must follow in step.
                self._client_salt = (self._client_salt + 1) & _U32_MASK
            parts += [header, pe_list, data]
            try:
                sock.sendall(b"".join(parts))
            except (BrokenPipeError, ConnectionResetError):
                # The server closed before reading everything, i.e. it refused
                # the request.  Keep the connection so that recv_response
                # reports this like any other missing reply.
                pass
        except BaseException:
            sock.close()
            raise
        self._pending = _PendingReply(sock, reply_salt)

    # -- replies ------------------------------------------------------------

    def recv_response(self, timeout: Optional[float] = None) -> bytes:
        """Wait for the reply to the outstanding request and return its data.

        Mirrors ``CcsRecvResponseMsg`` (and ``CcsRecvResponse``).  ``timeout``
        is in seconds; None uses the client's default timeout (which may be
        None: wait indefinitely), ``math.inf`` always waits indefinitely.

        Raises :class:`TimeoutError` if the reply has not fully arrived in
        time; the request stays outstanding, so the call can be repeated.
        Raises :class:`CcsNoReply` if the server closed the connection without
        replying, :class:`CcsAuthError` if an authenticated reply's hash is
        wrong, and :class:`CcsError` if the reply was cut short.
        """
        pending = self._pending
        if pending is None:
            raise RuntimeError("no CCS request is outstanding")
        if timeout is None:
            timeout = self.timeout
        if timeout is not None and math.isinf(timeout):
            timeout = None
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                if self._hash_bad(pending):
                    raise CcsAuthError("the reply's hash does not match the key; reply rejected")
                if pending.complete():
                    reply = bytes(pending.buf[pending.prefix_size + 4 : pending.total_size()])
                    self._abandon_pending()  # the server closes it anyway
                    return reply
                if pending.eof:
                    if not pending.buf:
                        raise CcsNoReply(f"the server closed the connection without a reply ({self._where()})")
                    raise CcsError(
                        f"the server closed the connection after {len(pending.buf)} bytes of an "
                        f"incomplete reply ({self._where()})"
                    )
                if deadline is None:
                    pending.sock.settimeout(None)
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"no complete CCS reply within {timeout} s")
                    pending.sock.settimeout(remaining)
                try:
                    pending.read_some()
                except socket.timeout:  # an alias of TimeoutError; reword it
                    raise TimeoutError(f"no complete CCS reply within {timeout} s") from None
        except TimeoutError:
            raise  # the request stays outstanding: the wait can be resumed
        except Exception:
            self._abandon_pending()
            raise

    def probe(self) -> bool:
        """True if :meth:`recv_response` would not block now (``CcsProbe``).

        That is, the whole reply has arrived, or the server has closed the
        connection (recv_response then raises).  Never blocks; False when no
        request is outstanding.
        """
        pending = self._pending
        if pending is None:
            return False
        while not (pending.complete() or pending.eof):
            readable, _, _ = select.select([pending.sock], [], [], 0)
            if not readable:
                return False
            pending.read_some()
        return True

    def _hash_bad(self, pending: _PendingReply) -> bool:
        if pending.reply_salt is None or len(pending.buf) < HASH_SIZE:
            return False
        assert self._key is not None
        expected = hash_52(self._key, pending.reply_salt)
        return not hmac.compare_digest(bytes(pending.buf[:HASH_SIZE]), expected)

    def _abandon_pending(self) -> None:
        if self._pending is not None:
            self._pending.close()
            self._pending = None

    def _where(self) -> str:
        return f"{self.host}:{self.port}"

    # -- convenience and lifetime -------------------------------------------

    def call(self, handler: Union[str, bytes], pe: int = 0, data: BytesLike = b"", timeout: Optional[float] = None) -> bytes:
        """``send_request`` followed by ``recv_response``; returns the reply."""
        self.send_request(handler, pe, data)
        return self.recv_response(timeout)

    def close(self) -> None:
        """Drop any outstanding request and release the client (``CcsFinalize``)."""
        self._abandon_pending()
        self._closed = True

    def __enter__(self) -> "CcsClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        auth = f", level={self.level}, client_id={self._client_id}" if self._key is not None else ""
        return f"CcsClient({self.host!r}, {self.port}{auth}, nodes={list(self._node_sizes)})"


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

EXIT_ERROR = 1  # connection, protocol or authentication failure
EXIT_USAGE = 2  # bad arguments (argparse's own code)
EXIT_TIMEOUT = 3
EXIT_NO_REPLY = 4


def _parse_host_port(text: str) -> tuple:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):  # [IPv6]:port
        host = host[1:-1]
    return host, int(port)


def _parse_pe_list(text: str) -> list:
    """``0,2,5-7`` -> [0, 2, 5, 6, 7] (order kept, ranges inclusive)."""
    pes = []
    try:
        for item in text.split(","):
            item = item.strip()
            if "-" in item:
                low, high = (int(x) for x in item.split("-", 1))
                if low > high:
                    raise ValueError
                pes.extend(range(low, high + 1))
            else:
                pes.append(int(item))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a PE list like 0,2,5-7, got {text!r}") from None
    if any(pe < 0 for pe in pes):
        raise argparse.ArgumentTypeError("PE numbers must be >= 0")
    return pes


def _read_data(spec: Optional[str]) -> bytes:
    if spec is None:
        return b""
    if spec == "-":
        return sys.stdin.buffer.read()
    if spec.startswith("@"):
        with open(spec[1:], "rb") as f:
            return f.read()
    return spec.encode("utf-8")


def _build_arg_parser() -> argparse.ArgumentParser:
    # prog defaults to how the tool was started: "converse-ccs" (the installed
    # command) or "converse_ccs.py" (the file, also under python -m).
    parser = argparse.ArgumentParser(
        description="Send one CCS request to a Converse job and print the reply bytes to stdout.",
        epilog=(
            "Exit status: 0 reply printed, 1 error, 2 bad arguments, "
            f"{EXIT_TIMEOUT} timed out, {EXIT_NO_REPLY} the server closed without a reply."
        ),
    )
    parser.add_argument("server", metavar="HOST:PORT", type=_parse_host_port, help="the CCS server address")
    parser.add_argument("handler", help="registered CCS handler name (shorter than 32 bytes)")
    dest = parser.add_mutually_exclusive_group()
    dest.add_argument("--pe", type=int, default=0, metavar="N", help="destination PE (default 0)")
    dest.add_argument("--all", action="store_true", help="broadcast to every PE (needs a merge function)")
    dest.add_argument("--pes", type=_parse_pe_list, metavar="LIST", help="multicast, e.g. 0,2,5-7")
    parser.add_argument(
        "--data",
        metavar="@FILE|-|TEXT",
        help="request data: the contents of FILE, stdin (-), or TEXT as UTF-8 (default: none)",
    )
    parser.add_argument("--auth", metavar="KEYFILE", help="file holding the 32 hex digit key")
    parser.add_argument("--level", type=int, default=0, help="security level of the key (default 0)")
    parser.add_argument("--timeout", type=float, metavar="S", help="seconds to wait for each step")
    parser.add_argument("--version", action="version", version=f"converse-ccs {__version__}")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = _build_arg_parser()
    args = parser.parse_args(argv)
    host, port = args.server
    if args.pe is not None and args.pe < 0:
        parser.error("--pe must be >= 0 (use --all or --pes for several PEs)")
    if args.level != 0 and args.auth is None:
        parser.error("--level needs --auth")
    try:
        _encode_handler_name(args.handler)  # fail before connecting
    except ValueError as e:
        parser.error(str(e))

    try:
        data = _read_data(args.data)
        key = read_key_file(args.auth, args.level) if args.auth else None
        with CcsClient(host, port, key=key, level=args.level, timeout=args.timeout) as ccs:
            if args.all:
                ccs.send_broadcast(args.handler, data)
            elif args.pes is not None:
                ccs.send_multicast(args.handler, args.pes, data)
            else:
                ccs.send_request(args.handler, args.pe, data)
            reply = ccs.recv_response()
    except TimeoutError as e:
        print(f"converse_ccs: timed out: {e}", file=sys.stderr)
        return EXIT_TIMEOUT
    except CcsNoReply as e:
        print(f"converse_ccs: no reply: {e}", file=sys.stderr)
        return EXIT_NO_REPLY
    except (OSError, ValueError) as e:  # CcsError is an OSError
        print(f"converse_ccs: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.buffer.write(reply)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
