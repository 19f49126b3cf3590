"""Baselines: what a team would typically build in Python instead of hongbao, serving the
same routes, so the storm can play one run against both and report the ratio and each audit.
``app`` is the FastAPI + uvicorn + Redis Lua pre-split list + asynchronous MySQL write design,
``serve`` runs it, ``audit`` checks its money."""
