"""One exception type for every failed call, carrying the gRPC code and the
stable reason of the coordinator's ``google.rpc.ErrorInfo`` (docs/api.md
lists the reasons)."""

from typing import Dict, List, Optional

import grpc
from google.rpc import error_details_pb2, status_pb2

DETAILS_KEY = "grpc-status-details-bin"


class CohortError(Exception):
    """A call the coordinator (or the connection to it) refused.

    ``code`` is the :class:`grpc.StatusCode`; ``reason`` the stable reason
    (``"TRAINING_NOT_FOUND"``, ``"NOT_LEADER"``...; empty when the answer
    carried none, as a connection failure does); ``metadata`` the reason's
    key/value details; ``fields`` the request fields a ``BadRequest`` named.
    """

    def __init__(self, code: grpc.StatusCode, message: str, reason: str = "",
                 metadata: Optional[Dict[str, str]] = None,
                 fields: Optional[List[str]] = None):
        super().__init__(f"{code.name}: {message}" + (f" [{reason}]" if reason else ""))
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})
        self.fields = list(fields or [])

    @property
    def leader(self) -> Optional[str]:
        """The leader a standby named in a NOT_LEADER answer, if any."""
        if self.reason != "NOT_LEADER":
            return None
        return self.metadata.get("leader") or None

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> "CohortError":
        """The error a failed call (sync or asyncio) carries."""
        code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
        message = error.details() if callable(getattr(error, "details", None)) else str(error)
        reason, metadata, fields = "", {}, []
        trailing = error.trailing_metadata() if callable(
            getattr(error, "trailing_metadata", None)) else None
        for key, value in trailing or ():
            if key != DETAILS_KEY:
                continue
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    reason, metadata = info.reason, dict(info.metadata)
                elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                    bad = error_details_pb2.BadRequest()
                    detail.Unpack(bad)
                    fields.extend(v.field for v in bad.field_violations)
        return cls(code or grpc.StatusCode.UNKNOWN, message or "", reason, metadata, fields)
