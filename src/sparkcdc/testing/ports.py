"""A free TCP port on 127.0.0.1 for a test server (MariaDB, Kafka, etcd, an emulator, sparkcdc)."""

import socket


def free_port() -> int:
    """A port nothing listens on now. Another process may take it before the caller's server
    binds it; a server that can fail that way is started again on another (ServerProcess.start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
