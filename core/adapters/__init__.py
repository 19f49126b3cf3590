"""Adapters behind the ports of hongbao.core.ports, one package per technology with the same file
names in each: ``sqlite`` (the embedded default), ``mysql`` (MySQL/MariaDB shards) and ``redis``
(standalone or Cluster); ``sql`` holds what both SQL dialects share. Only the composition root
(hongbao.server.composition) picks one."""
