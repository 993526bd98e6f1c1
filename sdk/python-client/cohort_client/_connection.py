"""Where the coordinator is and how to prove who we are, as the CLI reads
them: ``COHORT_COORDINATOR`` (one URL, or several comma-separated: the first
that answers is used), ``COHORT_TOKEN`` (sent as ``authorization: Bearer``)
and ``COHORT_CA_CERT`` (the PEM CA of ``https://`` coordinators)."""

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

DEFAULT_COORDINATOR = "http://127.0.0.1:50051"
#: How many NOT_LEADER answers one call follows to the leader they name.
MAX_FOLLOWS = 2


def split_urls(urls: Union[str, Sequence[str]]) -> List[str]:
    """``"a,b"`` or ``["a", "b"]`` as normalised URLs (``host:port`` is http)."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = []
    for item in items:
        item = item.strip()
        if item:
            out.append(item if "://" in item else f"http://{item}")
    if not out:
        raise ValueError("no coordinator address given")
    return out


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0]


def target_of(url: str) -> str:
    """The ``host:port`` gRPC dials for ``url``."""
    rest = url.split("://", 1)[1]
    return rest.split("/", 1)[0]


def is_loopback(url: str) -> bool:
    host = target_of(url)
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    else:
        host = host.rsplit(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Settings:
    """A client's coordinators, credentials and timeouts."""

    urls: List[str]
    token: Optional[str] = None
    ca_cert: Optional[bytes] = None
    connect_timeout: float = 5.0
    timeout: Optional[float] = 30.0
    allow_plaintext_token: bool = False
    metadata: Tuple[Tuple[str, str], ...] = field(default=())

    @classmethod
    def resolve(cls, coordinator, token, ca_cert, connect_timeout, timeout,
                allow_plaintext_token) -> "Settings":
        coordinator = coordinator or os.environ.get("COHORT_COORDINATOR") or DEFAULT_COORDINATOR
        token = token if token is not None else os.environ.get("COHORT_TOKEN") or None
        ca = ca_cert if ca_cert is not None else os.environ.get("COHORT_CA_CERT") or None
        if isinstance(ca, (str, Path)):
            ca = Path(ca).read_bytes()
        urls = split_urls(coordinator)
        for url in urls:
            if scheme_of(url) not in ("http", "https"):
                raise ValueError(f"{url}: a coordinator URL is http:// or https://")
            if token and scheme_of(url) == "http" and not is_loopback(url) \
                    and not allow_plaintext_token:
                raise ValueError(
                    f"{url}: refusing to send the token over plaintext to another host; "
                    "use https:// (or allow_plaintext_token=True)")
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        return cls(urls, token, ca, connect_timeout, timeout, allow_plaintext_token, metadata)

    def led_by(self, leader: str) -> Optional[List[str]]:
        """The URL list with ``leader`` first, or None when the leader's
        scheme differs (a standby's answer does not choose how we talk)."""
        leader = split_urls(leader)[0]
        if scheme_of(leader) != scheme_of(self.urls[0]):
            return None
        return [leader] + [u for u in self.urls if u != leader]

    def follow(self, leader: Optional[str]) -> bool:
        """Puts the leader a NOT_LEADER answer named first; False when
        there is none to follow."""
        urls = self.led_by(leader) if leader else None
        if not urls:
            return False
        self.urls = urls
        return True

    def unreachable(self, last: Optional[str]):
        """The error when no coordinator of the list answered."""
        import grpc
        from .errors import CohortError
        return CohortError(grpc.StatusCode.UNAVAILABLE,
                           f"no coordinator answered within {self.connect_timeout} s "
                           f"(last tried {last})")

    def credentials(self, url: str):
        import grpc
        if scheme_of(url) == "https":
            return grpc.ssl_channel_credentials(root_certificates=self.ca_cert)
        return None


def stubs_for(channel) -> dict:
    """The services a client calls, on one channel (sync or asyncio)."""
    from ._pb.cohort.v1.gpu_pb2_grpc import GpuServiceStub
    from ._pb.cohort.v1.sweep_service_pb2_grpc import SweepServiceStub
    from ._pb.cohort.v1.training_service_pb2_grpc import TrainingServiceStub
    return {"training": TrainingServiceStub(channel), "gpu": GpuServiceStub(channel),
            "sweep": SweepServiceStub(channel)}
