"""A throwaway CA with server and client certificates, for TLS tests (cryptography package)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertFiles:
    cert: str
    key: str


class TestCA:
    """A CA in `directory`; `issue(cn)` writes a certificate signed by it (or by `other` CA)."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str, name: str = "sparkcdc-test-ca"):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.timezone.utc)
        self._cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_path = os.path.join(directory, f"{name}.pem")
        with open(self.ca_path, "wb") as f:
            f.write(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, server: bool = False, client: bool | None = None) -> CertFiles:
        """A certificate for `common_name`: for a server (with 127.0.0.1/localhost names), a client
        (the default), or both (`server=True, client=True`, as a capture that also calls the owner)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage(
                ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
                + ([ExtendedKeyUsageOID.CLIENT_AUTH] if (not server if client is None else client) else [])),
                critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        files = CertFiles(os.path.join(self.directory, f"{common_name}.pem"),
                          os.path.join(self.directory, f"{common_name}-key.pem"))
        with open(files.cert, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        with open(files.key, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        os.chmod(files.key, 0o600)
        return files
