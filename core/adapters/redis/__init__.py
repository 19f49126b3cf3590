"""The Redis adapters (standalone or Cluster) of the production backend: the client and its lean path,
the send path's state, the grab filter, read views, queues and the push stores, each behind the
worker's circuit breaker (guard)."""
