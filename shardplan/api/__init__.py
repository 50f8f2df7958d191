"""The REST planning service: :func:`create_app` builds it, ``shardplan serve`` runs it."""
from .app import create_app  # noqa: F401
from .limits import Limits  # noqa: F401
