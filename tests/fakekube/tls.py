"""The fake API server's TLS: a certificate authority and a server certificate for 127.0.0.1, made once per process.

A real API server is reached over HTTPS only, and real clients depend on it: kubectl refuses to send a bearer token
over plain HTTP, and the `kubernetes` clients verify the server against the kubeconfig's
`certificate-authority-data`. Nothing is written to disk but a private temporary folder that `ssl` needs to load the
key pair from, removed at once.
"""

from __future__ import annotations

import base64
import datetime
import functools
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for any test run, short enough that a leaked CA is worthless tomorrow.
VALIDITY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class ServingCertificate:
    """PEM bytes of the CA certificate, and of the server's certificate and private key (signed by that CA)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(common_name: str = "fakekube-ca") -> ServingCertificate:
    """A new CA and a server certificate for 127.0.0.1 and localhost (SANs: Go's TLS ignores the common name)."""
    now = datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(minutes=5)  # tolerate a little clock skew between processes
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(_name(common_name))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver")).issuer_name(ca_cert.subject)
        .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("::1")),
            x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=server_cert.public_bytes(serialization.Encoding.PEM),
        key_pem=server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()),
    )


@functools.cache
def serving_certificate() -> ServingCertificate:
    """This process's certificate: one per run (every FakeKube of a test session shares it)."""
    return issue()


def server_context(certificate: ServingCertificate) -> ssl.SSLContext:
    """The server side: TLS 1.2+ with the certificate; no client certificates asked (auth is the bearer token)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="fakekube-tls-") as folder:  # mode 0700
        chain, key = Path(folder) / "server.crt", Path(folder) / "server.key"
        chain.write_bytes(certificate.cert_pem)
        key.write_bytes(certificate.key_pem)
        context.load_cert_chain(chain, key)
    return context


def client_context(certificate: ServingCertificate) -> ssl.SSLContext:
    """A client side that trusts only this CA: for tests that speak to the fake with urllib or httpx."""
    return ssl.create_default_context(cadata=certificate.ca_pem.decode())


@functools.cache
def default_server_context() -> ssl.SSLContext:
    """The server context for this process's certificate, loaded once (an SSLContext is safe to share)."""
    return server_context(serving_certificate())


def client_context_from_kubeconfig(kubeconfig: Path) -> ssl.SSLContext:
    """A client side trusting the CA a fake's kubeconfig names: for a fake running in another process."""
    config = yaml.safe_load(kubeconfig.read_text())
    ca_data = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
    return ssl.create_default_context(cadata=ca_data.decode())
