"""hongbao.bench.push: the push benchmark (``run``): hongbao's WebSocket fan-out, idle
memory, push latency and Redis memory per user, against a plain ``websockets`` server
(``baseline_server``) and a ceiling (``ceiling_server``) in the same run. Modules: ``client`` (the
light counting client), ``fleet`` (client processes), ``servers`` (the processes under test),
``script`` (the server scripts' command line), ``sides`` (fan-out and memory on every server),
``latency``, ``redis_memory``, ``run`` (the command, ratios, floors)."""
