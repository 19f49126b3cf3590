"""hongbao.bench.push: the push benchmark of issue 4 (``run``): hongbao's WebSocket fan-out, idle
memory, push latency and Redis memory per user, against a plain ``websockets`` server
(``baseline_server``) in the same run. Modules: ``client`` (the light counting client), ``fleet``
(client processes), ``servers`` (the processes under test), ``sides`` (fan-out and memory on both
servers), ``latency``, ``redis_memory``, ``run`` (the command, ratios, floors)."""
