"""Where the docker CLI would connect, resolved the way the CLI resolves it (DOCKER_HOST, DOCKER_CONTEXT,
config.json's current context), for the Docker SDK: its ``from_env()`` ignores contexts, so `sdk_client()`
hands it this endpoint. The SDK is used for one thing the CLI cannot give: the raw stats stream
(docker_stats.py); everything else goes through the CLI (docker.py)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.backends.docker import DEFAULT_HOST, _Model
from orchestrator.errors import TestbedError


class Endpoint(_Model):
    """Where the docker CLI would connect, and how."""

    host: str
    context: str
    tls: bool = False
    tls_verify: bool = False
    ca_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None


def docker_config_dir(env: Mapping[str, str]) -> Path:
    return Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else Path.home() / ".docker"


def context_dir(config_dir: Path, kind: str, name: str) -> Path:
    """contexts/meta/<sha256 of name>/ or contexts/tls/<sha256 of name>/, as the docker CLI stores them."""
    return config_dir / "contexts" / kind / hashlib.sha256(name.encode()).hexdigest()


def current_context(env: Mapping[str, str], config_dir: Path) -> str:
    """The CLI's rule: DOCKER_HOST means the default context; else DOCKER_CONTEXT; else config.json."""
    if env.get("DOCKER_HOST"):
        return "default"
    if env.get("DOCKER_CONTEXT"):
        return env["DOCKER_CONTEXT"]
    try:
        config = json.loads((config_dir / "config.json").read_text())
    except (OSError, ValueError):
        return "default"
    return str(config.get("currentContext") or "default")


def _tls_files(folder: Path) -> dict[str, Path | None]:
    found = {k: folder / f for k, f in (("ca_cert", "ca.pem"), ("client_cert", "cert.pem"),
                                        ("client_key", "key.pem"))}
    return {k: p if p.is_file() else None for k, p in found.items()}


def resolve_endpoint(env: Mapping[str, str] | None = None) -> Endpoint:
    """The engine the user's `docker` CLI talks to: DOCKER_HOST (+ DOCKER_TLS_VERIFY/DOCKER_CERT_PATH),
    else the context named by DOCKER_CONTEXT or config.json's currentContext (Endpoints.docker.Host and
    the context's TLS material), else the default socket."""
    env = os.environ if env is None else env
    config_dir = docker_config_dir(env)
    name = current_context(env, config_dir)
    if name == "default":
        verify = bool(env.get("DOCKER_TLS_VERIFY"))
        files = _tls_files(Path(env.get("DOCKER_CERT_PATH") or config_dir)) if verify or env.get("DOCKER_TLS") \
            else {}
        return Endpoint(host=env.get("DOCKER_HOST") or DEFAULT_HOST, context=name, tls=bool(files),
                        tls_verify=verify, **files)
    meta_path = context_dir(config_dir, "meta", name) / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        docker_ep = meta["Endpoints"]["docker"]
    except (OSError, ValueError, KeyError) as exc:
        raise TestbedError(f"docker context {name!r} not found or unreadable ({meta_path})",
                           hint="`docker context ls` lists the contexts; `docker context use default`") from exc
    files = _tls_files(context_dir(config_dir, "tls", name) / "docker")
    has_tls = any(files.values())
    return Endpoint(host=docker_ep["Host"], context=name, tls=has_tls,
                    tls_verify=has_tls and not docker_ep.get("SkipTLSVerify", False), **files)


def sdk_client_kwargs(ep: Endpoint) -> dict[str, Any]:
    """Arguments for docker.DockerClient that reach ``ep``."""
    from docker.tls import TLSConfig

    tls: TLSConfig | bool = False
    if ep.tls:
        cert = (str(ep.client_cert), str(ep.client_key)) if ep.client_cert and ep.client_key else None
        tls = TLSConfig(client_cert=cert, ca_cert=str(ep.ca_cert) if ep.ca_cert else None,
                        verify=ep.tls_verify)
    return {"base_url": ep.host, "tls": tls, "use_ssh_client": ep.host.startswith("ssh://")}


def sdk_client(timeout: int = 30) -> Any:
    import docker as sdk

    return sdk.DockerClient(timeout=timeout, **sdk_client_kwargs(resolve_endpoint()))

