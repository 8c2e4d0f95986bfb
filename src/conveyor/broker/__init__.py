"""Storage backends behind one protocol (``broker.base.Broker``) and the URL factory."""

from .base import Broker, EnqueueResult, Lease, Page, SearchQuery
from .factory import broker_from_url

__all__ = ["Broker", "EnqueueResult", "Lease", "Page", "SearchQuery", "broker_from_url"]
