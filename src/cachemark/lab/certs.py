"""Throw-away TLS material for a spawned server: a CA and a server certificate it signed.

``spawn:redis?tls=1`` (and ``spawn:memcached?tls=1``) need a certificate a client can
verify: the CA's certificate goes into the target URL (``ssl_ca_certs=…/ca.pem``), so the
run verifies the server as it would a real one. Everything lives in the server's private
temp dir and goes with it; keys are written 0600. The server certificate names
``127.0.0.1`` and ``localhost``; a client certificate signed by the same CA is made too,
for servers that ask clients for one.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from ..errors import BackendMissing


@dataclass(frozen=True)
class Certs:
    ca: str  # the CA's certificate (what clients trust)
    cert: str  # the server's certificate
    key: str  # the server's key
    client_cert: str
    client_key: str


def make_certs(directory: str) -> Certs:
    """Write a CA, a server certificate and a client certificate (EC P-256, one day) into ``directory``."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise BackendMissing("a TLS server needs the cryptography package (pip install cryptography)") from None

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def issue(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, signer: ec.EllipticCurvePrivateKey,
              ca: bool, extra: list[tuple[x509.ExtensionType, bool]]) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(issuer)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        for extension, critical in extra:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                             key_encipherment=False, data_encipherment=False, key_agreement=False,
                             encipher_only=False, decipher_only=False)
    ca = issue("cachemark throw-away CA", ca_key, name("cachemark throw-away CA"), ca_key, True,
               [(ca_usage, True)])
    server_key = ec.generate_private_key(ec.SECP256R1())
    names = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    server = issue("localhost", server_key, ca.subject, ca_key, False,
                   [(names, False), (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = issue("cachemark client", client_key, ca.subject, ca_key, False,
                   [(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)])

    def write(file: str, data: bytes, mode: int = 0o644) -> str:
        path = os.path.join(directory, file)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    return Certs(
        ca=write("ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
        cert=write("server.pem", server.public_bytes(serialization.Encoding.PEM)),
        key=write("server.key", pem_key(server_key), 0o600),
        client_cert=write("client.pem", client.public_bytes(serialization.Encoding.PEM)),
        client_key=write("client.key", pem_key(client_key), 0o600),
    )
