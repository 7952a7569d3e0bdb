"""A local SMTP sink for the alert tests: a real SMTP server on loopback (just enough of
RFC 5321 for smtplib: EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT) that keeps every
message it receives, parsed, in memory."""

from __future__ import annotations

import email
import socketserver
import threading
from email.message import Message
from typing import Any


class _Handler(socketserver.StreamRequestHandler):
    def _say(self, line: str) -> None:
        self.wfile.write((line + "\r\n").encode())

    def handle(self) -> None:
        sink: SmtpSink = self.server.sink  # type: ignore[attr-defined]
        self._say("220 sink ESMTP")
        rcpt: list[str] = []
        while True:
            raw = self.rfile.readline()
            if not raw:
                return
            cmd = raw.decode(errors="replace").strip()
            verb = cmd[:4].upper()
            if verb in ("EHLO", "HELO"):
                self._say("250 sink")
            elif verb == "MAIL":
                rcpt = []
                self._say("250 OK")
            elif verb == "RCPT":
                rcpt.append(cmd.split(":", 1)[1].strip(" <>"))
                self._say("250 OK")
            elif verb == "DATA":
                self._say("354 end with .")
                lines = []
                while True:
                    line = self.rfile.readline()
                    if not line or line in (b".\r\n", b".\n"):
                        break
                    lines.append(line[1:] if line.startswith(b"..") else line)
                message = email.message_from_bytes(b"".join(lines))
                sink.received.append((list(rcpt), message))
                self._say("250 OK queued")
            elif verb == "QUIT":
                self._say("221 bye")
                return
            else:  # RSET, NOOP and anything else
                self._say("250 OK")


class SmtpSink:
    """``with SmtpSink() as sink:`` listens on ``sink.port`` until the block ends."""

    def __init__(self) -> None:
        self.received: list[tuple[list[str], Message]] = []
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.sink = self  # type: ignore[attr-defined]
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def connection_uri(self) -> str:
        return (f"smtp://127.0.0.1:{self.port}?disable_tls=true&disable_ssl=true"
                "&from_email=dp-ops%40example.org&retry_limit=0&timeout=10")

    def __enter__(self) -> SmtpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def subjects(self) -> list[str]:
        return [str(m["Subject"]) for _, m in self.received]

    def bodies(self) -> list[str]:
        out = []
        for _, message in self.received:
            for part in message.walk():
                if part.get_content_type() == "text/html":
                    payload = part.get_payload(decode=True)
                    out.append(payload.decode() if isinstance(payload, bytes) else "")
        return out
