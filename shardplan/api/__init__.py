"""The REST planning service (FastAPI) will live here; it is not built yet (see the open issue on the
four ways users use shardplan). The Python API is :mod:`shardplan.planning`."""
