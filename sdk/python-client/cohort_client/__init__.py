"""A Python client of the cohort coordinator (the ``cohort.v1`` gRPC API).

>>> from cohort_client import Client
>>> with Client() as cohort:                     # COHORT_COORDINATOR, COHORT_TOKEN...
...     t = cohort.submit("job.toml", gpus=2, labels={"sweep": "k"})
...     for event in cohort.watch(t.id):
...         print(event.WhichOneof("event"))

:class:`AsyncClient` is the same for asyncio. Messages are the generated
``cohort.v1`` stubs, importable as ``cohort_client.pb.<module>_pb2``.
"""

from . import _requests
from ._pb.cohort import v1 as pb
from .aio import AsyncClient
from .client import Client
from .errors import CohortError

State = _requests.State
FINAL_STATES = _requests.FINAL_STATES

__all__ = ["AsyncClient", "Client", "CohortError", "FINAL_STATES", "State", "pb"]
