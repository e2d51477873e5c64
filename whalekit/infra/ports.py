"""Free TCP ports on this machine: for the proposer's local server and the trainer ranks'
rendezvous, which both bind 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now. Another process may take it before the server binds it:
    `start_llama_server` then retries with a new one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port
